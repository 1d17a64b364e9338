#!/usr/bin/env python3
"""Ratios of `benches/overhead.rs`: the layer against the bare inner service, pair by pair.

One run of a pair moves by more than the layer's cost (other work on the machine, the CPU's
state), so each pair is measured RUNS times (default 5), bare and layer one after the other,
alternating which goes first, each run a short criterion measurement of that one benchmark in a
process of its own. Each run gives one ratio (layer median / bare median, criterion's
`median.point_estimate`); the report gives the median of those ratios, their spread (lowest and
highest) and, with --check, PASS or MISS against each target. Targets are ratios against a real
server (rmcp) plus two kept echo ratios; the other echo pairs are information, not targets.

By default criterion measures the CPU time of the bench's thread (BENCH_CLOCK=cpu, see
benches/overhead.rs), which does not count the time the thread waits for a core that other
processes hold; --clock wall measures wall-clock time, as `cargo bench` does.

    python3 scripts/bench_report.py                  # build, measure, table, docs/overhead.svg
    python3 scripts/bench_report.py --check          # ... + PASS/MISS per target
    python3 scripts/bench_report.py --only rmcp      # pairs whose label contains `rmcp`
    python3 scripts/bench_report.py --from target/bench_report/runs.json --check   # re-report

A full run (12 pairs, 5 runs each, 1 s warm-up + 2 s measurement per run) takes about 8 minutes
on 2 cores. Every run is kept in target/bench_report/runs.json. Standard library only; always
exits 0 (a report, not a gate).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
GROUP = "overhead"
OUT = ROOT / "target" / "bench_report"
CLOCKS = {"cpu": "CPU time of the bench thread", "wall": "wall-clock time"}


@dataclass(frozen=True)
class Pair:
    label: str
    bare: str
    layer: str
    target: float | None  # layer/bare median ratio at most this; None: information
    note: str = ""


PAIRS = [
    Pair("rmcp tools_list", "rmcp/bare/tools_list", "rmcp/layer/tools_list", 1.03),
    Pair("rmcp call_first", "rmcp/bare/call_first", "rmcp/layer/call_first", 1.10),
    Pair("rmcp call_retry", "rmcp/bare/call_retry", "rmcp/layer/call_retry", 1.10),
    Pair(
        "rmcp-sse call_first",
        "rmcp-sse/bare/call_first",
        "rmcp-sse/layer/call_first",
        1.10,
    ),
    Pair("echo tools_list", "echo/bare/tools_list", "echo/layer/tools_list", 1.05),
    Pair(
        "echo call_retry_64k",
        "echo/bare/call_retry_64k",
        "echo/layer/call_retry_64k",
        1.30,
    ),
    Pair("echo call_first", "echo/bare/call_first", "echo/layer/call_first", None),
    Pair("echo call_retry", "echo/bare/call_retry", "echo/layer/call_retry", None),
    Pair(
        "echo call_retry_cold",
        "echo/bare/call_retry",
        "echo/layer/call_retry_cold",
        None,
        "token sealed by another replica",
    ),
    Pair(
        "echo call_reask",
        "echo/bare/call_retry",
        "echo/layer/call_reask",
        None,
        "the layer re-asks; bare is the completed retry",
    ),
    Pair(
        "echo call_retry_progress",
        "echo/bare/call_retry_progress",
        "echo/layer/call_retry_progress",
        None,
        "a new _meta.progressToken on every call",
    ),
    Pair("sse call_first", "sse/bare/call_first", "sse/layer/call_first", None),
]


# --- measuring ---------------------------------------------------------------------------------


def bench_binary(bench: str = GROUP) -> Path:
    """Builds the bench `bench` (release) and returns its executable."""
    print(f"building the {bench} bench ...", file=sys.stderr)
    output = subprocess.run(
        ["cargo", "bench", "--bench", bench, "--no-run", "--message-format=json"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    for line in output.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if (
            message.get("reason") == "compiler-artifact"
            and message.get("target", {}).get("name") == bench
            and message.get("executable")
        ):
            return Path(message["executable"])
    raise SystemExit(f"bench_report: no executable for the {bench} bench in cargo's output")


def median_ns(home: Path, id_: str) -> float:
    """criterion's median for `overhead/<id>` from its last run under `home`."""
    for meta_path in (home / GROUP).glob("*/new/benchmark.json"):
        meta = json.loads(meta_path.read_text())
        if meta.get("full_id") == f"{GROUP}/{id_}":
            estimates = json.loads(meta_path.with_name("estimates.json").read_text())
            return float(estimates["median"]["point_estimate"])
    raise SystemExit(f"bench_report: criterion wrote no result for {GROUP}/{id_}")


def measure_one(
    exe: Path, home: Path, id_: str, warm_up: float, measurement: float, clock: str
) -> float:
    env = dict(os.environ, CRITERION_HOME=str(home), BENCH_CLOCK=clock)
    done = subprocess.run(
        [
            str(exe),
            "--bench",
            "--exact",
            f"{GROUP}/{id_}",
            "--warm-up-time",
            str(warm_up),
            "--measurement-time",
            str(measurement),
            "--noplot",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"bench_report: {GROUP}/{id_} failed ({done.returncode})")
    return median_ns(home, id_)


def measure(
    pairs: list[Pair], runs: int, warm_up: float, measurement: float, clock: str
) -> dict:
    exe = bench_binary()
    home = OUT / "criterion"
    started = time.monotonic()
    record: dict = {
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": runs,
        "warm_up_s": warm_up,
        "measurement_s": measurement,
        "clock": clock,
        "machine": machine(),
        "pairs": {},
    }
    for index, pair in enumerate(pairs, 1):
        samples = []
        for run in range(runs):
            # Alternate which half goes first, so that neither always follows the other.
            order = ("bare", "layer") if run % 2 == 0 else ("layer", "bare")
            sample = {}
            for half in order:
                sample[half] = measure_one(
                    exe, home, getattr(pair, half), warm_up, measurement, clock
                )
            samples.append(sample)
            ratio = sample["layer"] / sample["bare"]
            print(
                f"[{index}/{len(pairs)}] {pair.label} run {run + 1}/{runs}: "
                f"bare {micros(sample['bare'])}, layer {micros(sample['layer'])}, "
                f"ratio {ratio:.3f}",
                file=sys.stderr,
            )
        record["pairs"][pair.label] = samples
    record["seconds"] = round(time.monotonic() - started)
    return record


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs, {model}".strip(", ")


# --- reporting ---------------------------------------------------------------------------------


def micros(ns: float) -> str:
    us = ns / 1000.0
    if us < 100:
        return f"{us:.2f} µs"
    return f"{us:.1f} µs"


@dataclass(frozen=True)
class Row:
    pair: Pair
    samples: list[dict]

    @property
    def ratios(self) -> list[float]:
        return [s["layer"] / s["bare"] for s in self.samples]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def bare(self) -> float:
        return statistics.median(s["bare"] for s in self.samples)

    @property
    def layer(self) -> float:
        return statistics.median(s["layer"] for s in self.samples)

    def verdict(self) -> str:
        if self.pair.target is None:
            return "info"
        return "PASS" if self.ratio <= self.pair.target else "MISS"


def table(rows: list[Row]) -> str:
    lines = [
        "| pair | bare (median) | layer (median) | ratio, median of runs | spread (low–high) | target |",
        "|---|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        ratios = row.ratios
        target = (
            f"≤ {row.pair.target:.2f}: **{row.verdict()}**"
            if row.pair.target is not None
            else "information"
        )
        label = f"`{row.pair.label}`" + (f" ({row.pair.note})" if row.pair.note else "")
        lines.append(
            f"| {label} | {micros(row.bare)} | {micros(row.layer)} | {row.ratio:.3f} | "
            f"{min(ratios):.3f}–{max(ratios):.3f} | {target} |"
        )
    return "\n".join(lines)


# --- SVG ---------------------------------------------------------------------------------------

WIDTH = 820
MARGIN = 24
LABEL_W = 190
PLOT_X = MARGIN + LABEL_W
PLOT_W = WIDTH - PLOT_X - MARGIN - 150  # room for the value and verdict
ROW_H = 30
FONT = "font-family=\"-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif\""
COLOURS = {"PASS": "#1a7f37", "MISS": "#cf222e", "info": "#6e7781"}


def svg(rows: list[Row], record: dict) -> str:
    parts: list[str] = []

    def text(x: float, y: float, body: str, size: int = 13, **attrs: str) -> None:
        extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}"{extra}>{escape(body)}</text>'
        )

    low = 0.95
    high = max(max(r.ratios) for r in rows) * 1.04
    high = max(high, 1.4)

    def x_of(ratio: float) -> float:
        return PLOT_X + PLOT_W * (ratio - low) / (high - low)

    y = MARGIN
    text(MARGIN, y + 16, "tower-elicitation: layer / bare inner service, per pair", 18,
         font_weight="600")
    y += 24
    started = record.get("started", "")[:16].replace("T", " ")
    text(
        MARGIN,
        y + 14,
        f"median of {record.get('runs', '?')} alternating runs (bar), lowest–highest run "
        f"(whisker), target (tick); {CLOCKS[record.get('clock', 'wall')]}; {started} UTC",
        12,
        fill="#57606a",
    )
    y += 30
    axis_top = y
    for index, row in enumerate(rows):
        cy = y + ROW_H / 2
        if index % 2 == 0:
            parts.append(
                f'<rect x="{MARGIN}" y="{y:.1f}" width="{WIDTH - 2 * MARGIN}" '
                f'height="{ROW_H}" fill="#f6f8fa"/>'
            )
        text(PLOT_X - 10, cy + 4, row.pair.label, 13, text_anchor="end")
        colour = COLOURS[row.verdict()] if row.pair.target is not None else "#2f6fb0"
        ratio = row.ratio
        parts.append(
            f'<rect x="{x_of(1.0):.1f}" y="{cy - 7:.1f}" '
            f'width="{max(1.0, x_of(ratio) - x_of(1.0)):.1f}" height="14" rx="2" '
            f'fill="{colour}" fill-opacity="0.75"><title>{escape(row.pair.label)}: '
            f"{', '.join(f'{r:.3f}' for r in row.ratios)}</title></rect>"
        )
        lo, hi = min(row.ratios), max(row.ratios)
        parts.append(
            f'<line x1="{x_of(lo):.1f}" y1="{cy:.1f}" x2="{x_of(hi):.1f}" y2="{cy:.1f}" '
            'stroke="#1f2328" stroke-width="1.5"/>'
        )
        for end in (lo, hi):
            parts.append(
                f'<line x1="{x_of(end):.1f}" y1="{cy - 5:.1f}" x2="{x_of(end):.1f}" '
                f'y2="{cy + 5:.1f}" stroke="#1f2328" stroke-width="1.5"/>'
            )
        if row.pair.target is not None:
            tx = x_of(row.pair.target)
            parts.append(
                f'<line x1="{tx:.1f}" y1="{cy - 11:.1f}" x2="{tx:.1f}" y2="{cy + 11:.1f}" '
                'stroke="#1f2328" stroke-width="2.5" stroke-dasharray="3,2"/>'
            )
        verdict = row.verdict()
        label = f"{ratio:.3f}×"
        if row.pair.target is not None:
            label += f"  {verdict} (≤ {row.pair.target:.2f})"
        text(PLOT_X + PLOT_W + 10, cy + 4, label, 13,
             fill=COLOURS[verdict] if verdict != "info" else "#1f2328",
             font_weight="600" if verdict != "info" else "400")
        y += ROW_H
    # Axis: 1.0 and a few gridlines.
    tick = 0.1 if high - low < 1.2 else 0.25
    value = 1.0
    while value <= high:
        gx = x_of(value)
        parts.append(
            f'<line x1="{gx:.1f}" y1="{axis_top:.1f}" x2="{gx:.1f}" y2="{y:.1f}" '
            f'stroke="{"#57606a" if value == 1.0 else "#d0d7de"}" stroke-width="1"/>'
        )
        text(gx, y + 16, f"{value:.2f}×", 11, text_anchor="middle", fill="#57606a")
        value = round(value + tick, 4)
    y += 24
    text(
        MARGIN,
        y + 12,
        "Targets: rmcp pairs and two echo pairs; the other echo pairs are information.",
        12,
        fill="#57606a",
    )
    height = y + 12 + MARGIN
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" {FONT} fill="#1f2328" stroke="none" '
        'xml:space="preserve">\n<rect width="100%" height="100%" fill="#ffffff"/>\n'
    )
    return head + "\n".join(parts) + "\n</svg>\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per pair (default 5)")
    parser.add_argument("--warm-up", type=float, default=1.0, help="criterion warm-up, s")
    parser.add_argument("--measurement", type=float, default=2.0, help="criterion measurement, s")
    parser.add_argument("--only", default="", help="only pairs whose label contains this")
    parser.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="what criterion measures: the bench thread's CPU time (default), or wall-clock time",
    )
    parser.add_argument("--from", dest="from_", type=Path, help="report a saved runs.json")
    parser.add_argument(
        "--svg",
        default=str(ROOT / "docs" / "overhead.svg"),
        help="where to write the chart (default: docs/overhead.svg; '' for none)",
    )
    parser.add_argument("--check", action="store_true", help="PASS/MISS for each target")
    args = parser.parse_args()

    pairs = [p for p in PAIRS if args.only in p.label]
    if args.from_:
        record = json.loads(args.from_.read_text())
    else:
        record = measure(pairs, args.runs, args.warm_up, args.measurement, args.clock)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "runs.json").write_text(json.dumps(record, indent=1) + "\n")
    rows = [Row(p, record["pairs"][p.label]) for p in pairs if p.label in record["pairs"]]
    if not rows:
        print("no results", file=sys.stderr)
        return 0

    print(
        f"Machine: {record.get('machine', '?')}. {record.get('runs')} runs per pair, "
        f"criterion {record.get('warm_up_s')} s warm-up + {record.get('measurement_s')} s "
        f"measurement per run, {CLOCKS[record.get('clock', 'wall')]}; "
        f"run of {record.get('started', '?')}"
        + (f", {record['seconds']} s in all" if "seconds" in record else "")
        + "."
    )
    print()
    print(table(rows))
    if args.check:
        print("\nTargets (median ratio of the runs; spread = lowest–highest run):")
        for row in rows:
            if row.pair.target is None:
                continue
            ratios = row.ratios
            print(
                f"  {row.verdict():<4}  {row.pair.label:<22} {row.ratio:.3f} "
                f"(runs {min(ratios):.3f}–{max(ratios):.3f}; target ≤ {row.pair.target:.2f})"
            )
    if args.svg:
        out = Path(args.svg)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(svg(rows, record))
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
