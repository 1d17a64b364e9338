#!/usr/bin/env python3
"""Report on `cargo bench --bench overhead`: the layer against the bare inner service.

Reads criterion's results (target/criterion/overhead/<dir>/new/{benchmark,estimates}.json; the
ids contain `/`, which criterion writes as `_` in <dir>, so the ids are read from
benchmark.json), prints a Markdown table of medians per bare/layer pair, writes an SVG bar chart
and, with --check, compares each pair against its target. Standard library only; always exits
0 (it is a report, not a gate).

    cargo bench --bench overhead
    python3 scripts/bench_report.py                 # table + docs/overhead.svg
    python3 scripts/bench_report.py --check         # ... + PASS/MISS per target
    python3 scripts/bench_report.py --svg ''        # no SVG

The medians are criterion's `median.point_estimate` from the most recent run of each id, so
a pair whose two halves were run at different times (or a filtered run) mixes runs; the
report prints when each pair was measured if they differ by more than a minute.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Pair:
    label: str
    bare: str
    layer: str
    # ("ratio", 1.05): layer/bare <= 1.05; ("diff", 1.5): layer - bare <= 1.5 µs.
    target: tuple[str, float]


PAIRS = [
    Pair(
        "echo tools_list",
        "echo/bare/tools_list",
        "echo/layer/tools_list",
        ("ratio", 1.05),
    ),
    Pair(
        "echo call_first",
        "echo/bare/call_first",
        "echo/layer/call_first",
        ("diff", 1.5),
    ),
    Pair(
        "echo call_retry",
        "echo/bare/call_retry",
        "echo/layer/call_retry",
        ("diff", 2.5),
    ),
    Pair(
        "rmcp call_retry",
        "rmcp/bare/call_retry",
        "rmcp/layer/call_retry",
        ("ratio", 1.10),
    ),
    Pair(
        "echo call_retry_64k",
        "echo/bare/call_retry_64k",
        "echo/layer/call_retry_64k",
        ("ratio", 1.30),
    ),
    Pair(
        "sse call_first", "sse/bare/call_first", "sse/layer/call_first", ("ratio", 1.15)
    ),
]
# Variants of the retry measured behind the layer only, drawn in the echo call_retry group next
# to the retry they vary, and compared in the table with its bare half: (id, bar name, legend).
VARIANTS = [
    # The layer answering an invalid answer itself (the inner service is not called).
    ("echo/layer/call_reask", "re-ask", "layer re-asks (invalid answer)"),
    # A token another replica sealed: opened in full rather than found among those kept.
    ("echo/layer/call_retry_cold", "cold", "token sealed by another replica"),
]
VARIANT_GROUP = "echo call_retry"


@dataclass(frozen=True)
class Estimate:
    median_ns: float
    low_ns: float  # 95 % confidence interval of the median
    high_ns: float
    measured: dt.datetime


def load(criterion_dir: Path, group: str) -> dict[str, Estimate]:
    """Every `<group>/<id>` result under criterion_dir, by id (the part after the group)."""
    results: dict[str, Estimate] = {}
    for estimates in sorted((criterion_dir / group).glob("*/new/estimates.json")):
        meta_path = estimates.with_name("benchmark.json")
        try:
            meta = json.loads(meta_path.read_text())
            function_id = meta["function_id"]
            if meta.get("value_str"):
                function_id = f"{function_id}/{meta['value_str']}"
        except (OSError, ValueError, KeyError):
            # No benchmark.json: fall back on the directory name (`/` written as `_`).
            function_id = estimates.parent.parent.name
        try:
            median = json.loads(estimates.read_text())["median"]
            interval = median["confidence_interval"]
            results[function_id] = Estimate(
                median_ns=float(median["point_estimate"]),
                low_ns=float(interval["lower_bound"]),
                high_ns=float(interval["upper_bound"]),
                measured=dt.datetime.fromtimestamp(estimates.stat().st_mtime),
            )
        except (OSError, ValueError, KeyError) as error:
            print(f"warning: skipping {estimates}: {error!r}", file=sys.stderr)
    return results


def micros(ns: float) -> str:
    us = ns / 1000.0
    if us < 100:
        return f"{us:.2f} µs"
    if us < 10_000:
        return f"{us:.1f} µs"
    return f"{us / 1000:.2f} ms"


def signed_micros(ns: float) -> str:
    us = ns / 1000.0
    return f"{us:+.2f} µs" if abs(us) < 100 else f"{us:+.1f} µs"


@dataclass(frozen=True)
class Row:
    pair: Pair
    bare: Estimate | None
    layer: Estimate | None

    @property
    def complete(self) -> bool:
        return self.bare is not None and self.layer is not None

    @property
    def ratio(self) -> float:
        assert self.bare is not None and self.layer is not None
        return self.layer.median_ns / self.bare.median_ns

    @property
    def diff_ns(self) -> float:
        assert self.bare is not None and self.layer is not None
        return self.layer.median_ns - self.bare.median_ns

    def check(self) -> tuple[str, str]:
        """(PASS | MISS | N/A, a description of the value against the target)."""
        kind, limit = self.pair.target
        wanted = f"ratio ≤ {limit:.2f}" if kind == "ratio" else f"diff ≤ {limit:.1f} µs"
        if not self.complete:
            return "N/A", f"{wanted}: no result"
        if kind == "ratio":
            value, shown = self.ratio, f"{self.ratio:.3f}"
        else:
            value, shown = self.diff_ns / 1000.0, signed_micros(self.diff_ns)
        return ("PASS" if value <= limit else "MISS"), f"{wanted}: {shown}"


def table(rows: list[Row], variants: dict[str, Estimate | None]) -> str:
    lines = [
        "| pair | bare median | layer median | ratio (layer/bare) | layer − bare |",
        "|---|--:|--:|--:|--:|",
    ]
    for row in rows:
        bare = micros(row.bare.median_ns) if row.bare else "—"
        layer = micros(row.layer.median_ns) if row.layer else "—"
        ratio = f"{row.ratio:.3f}" if row.complete else "—"
        diff = signed_micros(row.diff_ns) if row.complete else "—"
        lines.append(f"| {row.pair.label} | {bare} | {layer} | {ratio} | {diff} |")
    retry = next(r for r in rows if r.pair.label == VARIANT_GROUP)
    for id_, name, legend in VARIANTS:
        estimate = variants.get(id_)
        layer = micros(estimate.median_ns) if estimate else "—"
        ratio = diff = bare = "—"
        if estimate and retry.bare:
            bare = micros(retry.bare.median_ns)
            ratio = f"{estimate.median_ns / retry.bare.median_ns:.3f}"
            diff = signed_micros(estimate.median_ns - retry.bare.median_ns)
        label = f"{VARIANT_GROUP}, {name}: {legend}"
        lines.append(f"| {label} | {bare} | {layer} | {ratio} | {diff} |")
    return "\n".join(lines)


def stale_note(rows: list[Row]) -> list[str]:
    """Pairs whose bare and layer results come from runs more than a minute apart."""
    notes = []
    for row in rows:
        if row.complete:
            assert row.bare is not None and row.layer is not None
            gap = abs((row.layer.measured - row.bare.measured).total_seconds())
            if gap > 60:
                notes.append(
                    f"note: {row.pair.label}: bare measured {row.bare.measured:%Y-%m-%d %H:%M}, "
                    f"layer {row.layer.measured:%Y-%m-%d %H:%M} (different runs)"
                )
    return notes


# --- SVG ---------------------------------------------------------------------------------------

WIDTH = 800
MARGIN = 24
LABEL_W = 110  # the bar labels' column
BAR_X = MARGIN + LABEL_W
VALUE_W = 96  # room right of the longest bar for its value
BAR_MAX = WIDTH - BAR_X - MARGIN - VALUE_W
BAR_H = 22
BAR_GAP = 6
HEADER_H = 26
GROUP_GAP = 18
FONT = "font-family=\"-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif\""
COLOURS = {"bare": "#9aa5b1", "layer": "#2f6fb0", "re-ask": "#d9822b", "cold": "#8250df"}
VERDICT_COLOURS = {"PASS": "#1a7f37", "MISS": "#cf222e", "N/A": "#6e7781"}


def svg(
    rows: list[Row],
    variants: dict[str, Estimate | None],
    checked: bool,
    title_note: str,
) -> str:
    parts: list[str] = []
    y = MARGIN

    def text(x: float, y: float, body: str, size: int = 14, **attrs: str) -> None:
        extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}"{extra}>{escape(body)}</text>'
        )

    text(
        MARGIN,
        y + 16,
        "tower-elicitation: ElicitationLayer vs the bare inner service",
        18,
        font_weight="600",
    )
    y += 24
    text(
        MARGIN,
        y + 14,
        f"criterion medians, group `overhead`{title_note}",
        13,
        fill="#57606a",
    )
    y += 18
    text(
        MARGIN,
        y + 14,
        "Each group is drawn to its own scale (longest bar = the group's maximum).",
        13,
        fill="#57606a",
    )
    y += 18
    # Legend.
    y += 8
    x = MARGIN
    legends = [("bare", "bare inner service"), ("layer", "behind the layer")]
    legends += [(name, legend) for _, name, legend in VARIANTS]
    for name, label in legends:
        width = 20 + 7 * len(label) + 20
        if x + width > WIDTH - MARGIN:
            x, y = MARGIN, y + 20
        parts.append(
            f'<rect x="{x}" y="{y + 2}" width="14" height="14" rx="2" fill="{COLOURS[name]}"/>'
        )
        text(x + 20, y + 14, label, 13)
        x += width
    y += 22 + GROUP_GAP

    for row in rows:
        bars: list[tuple[str, Estimate | None]] = [
            ("bare", row.bare),
            ("layer", row.layer),
        ]
        if row.pair.label == VARIANT_GROUP:
            bars += [(name, variants.get(id_)) for id_, name, _ in VARIANTS]
        # Header: the pair, its ratio and difference, the verdict.
        text(MARGIN, y + 17, row.pair.label, 15, font_weight="600")
        if row.complete:
            summary = (
                f"ratio {row.ratio:.2f}×  ·  layer − bare {signed_micros(row.diff_ns)}"
            )
        else:
            summary = "incomplete: run the full bench"
        text(MARGIN + 190, y + 17, summary, 14)
        if checked:
            verdict, detail = row.check()
            text(
                WIDTH - MARGIN,
                y + 17,
                f"{verdict}  ({detail})",
                13,
                text_anchor="end",
                fill=VERDICT_COLOURS[verdict],
                font_weight="600",
            )
        y += HEADER_H
        scale = max((e.median_ns for _, e in bars if e is not None), default=1.0)
        for name, estimate in bars:
            text(BAR_X - 10, y + 16, name, 14, text_anchor="end")
            if estimate is None:
                text(BAR_X, y + 16, "no result", 13, fill="#6e7781")
            else:
                width = max(1.0, BAR_MAX * estimate.median_ns / scale)
                tooltip = (
                    f"{name}: median {micros(estimate.median_ns)} "
                    f"(95% CI {micros(estimate.low_ns)} – {micros(estimate.high_ns)})"
                )
                parts.append(
                    f'<rect x="{BAR_X}" y="{y}" width="{width:.1f}" height="{BAR_H}" rx="2" '
                    f'fill="{COLOURS[name]}"><title>{escape(tooltip)}</title></rect>'
                )
                text(BAR_X + width + 6, y + 16, micros(estimate.median_ns), 14)
            y += BAR_H + BAR_GAP
        y += GROUP_GAP - BAR_GAP
        if row is rows[-1]:
            continue
        parts.append(
            f'<line x1="{MARGIN}" y1="{y - GROUP_GAP / 2:.1f}" x2="{WIDTH - MARGIN}" '
            f'y2="{y - GROUP_GAP / 2:.1f}" stroke="#d0d7de" stroke-width="1"/>'
        )
    height = y + MARGIN - GROUP_GAP
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" {FONT} fill="#1f2328" stroke="none" '
        'xml:space="preserve">\n'
        f'<rect width="100%" height="100%" fill="#ffffff"/>\n'
    )
    return head + "\n".join(parts) + "\n</svg>\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--criterion-dir",
        type=Path,
        default=ROOT / "target" / "criterion",
        help="criterion's output directory (default: target/criterion)",
    )
    parser.add_argument(
        "--group", default="overhead", help="the benchmark group (default: overhead)"
    )
    parser.add_argument(
        "--svg",
        default=str(ROOT / "docs" / "overhead.svg"),
        help="where to write the chart (default: docs/overhead.svg; '' for none)",
    )
    parser.add_argument(
        "--check", action="store_true", help="print PASS/MISS for each pair's target"
    )
    args = parser.parse_args()

    results = load(args.criterion_dir, args.group)
    if not results:
        print(
            f"no criterion results under {args.criterion_dir / args.group}; "
            "run `cargo bench --bench overhead` first",
            file=sys.stderr,
        )
        return 0
    rows = [Row(p, results.get(p.bare), results.get(p.layer)) for p in PAIRS]
    variants = {id_: results.get(id_) for id_, _, _ in VARIANTS}

    print(table(rows, variants))
    missing = [i for p in PAIRS for i in (p.bare, p.layer) if i not in results]
    missing += [id_ for id_, estimate in variants.items() if estimate is None]
    if missing:
        print(f"\nmissing results: {', '.join(missing)}")
    for note in stale_note(rows):
        print(note)

    if args.check:
        print("\nTargets:")
        for row in rows:
            verdict, detail = row.check()
            print(f"  {verdict:<4}  {row.pair.label:<20} {detail}")

    if args.svg:
        newest = max(e.measured for e in results.values())
        out = Path(args.svg)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            svg(rows, variants, args.check, f", run of {newest:%Y-%m-%d %H:%M}")
        )
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
