#!/usr/bin/env python3
"""Instructions per request, pair by pair: `benches/instructions.rs` under callgrind.

The pairs are `bench_report.py`'s. Each benchmark id runs once under
`valgrind --tool=callgrind`, collecting only inside the measured requests, so the count is the
same from run to run whatever else the machine does (to within a few instructions per request:
hash seeds differ). What it says: how much work the layer adds, and whether a change added or
removed work. What it does not say: time (a cache miss is one instruction), and the MAC's share
(under valgrind `sha2` runs its portable code, not the CPU's SHA extensions).

    python3 scripts/instructions.py                          # build, count, table
    python3 scripts/instructions.py --json target/instr.json # ... and keep the counts
    python3 scripts/instructions.py --compare before.json    # ... beside counts kept earlier
    python3 scripts/instructions.py --only rmcp              # pairs whose label contains `rmcp`
    python3 scripts/instructions.py --check                  # ... and PASS/MISS per target (issue #29)

About 2 minutes after the build (22 ids, 1,000 requests each). Needs valgrind (Debian's
`valgrind`). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import PAIRS, bench_binary  # noqa: E402  (the time report's pairs and build)

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = 1000

# The targets of issue #29: the most instructions the layer may add to a request (layered minus
# bare, on the pairs above), by what the request is, with the pairs that stand for it.
TARGETS: list[tuple[str, int, tuple[str, ...]]] = [
    ("tools/list", 2_000, ("echo tools_list", "rmcp tools_list")),
    (
        "first round, JSON and event stream",
        50_000,
        ("rmcp call_first", "rmcp-sse call_first", "echo call_first", "sse call_first"),
    ),
    ("verified retry", 25_000, ("rmcp call_retry", "echo call_retry")),
    ("the layer's re-ask", 60_000, ("echo call_reask",)),
    ("retry with 64 KiB arguments", 700_000, ("echo call_retry_64k",)),
]


def count(exe: Path, bench_id: str, requests: int) -> float:
    """Instructions per measured request of `bench_id`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--toggle-collect=*instructions::measured*",
                f"--callgrind-out-file={out}",
                str(exe),
                bench_id,
                str(requests),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = "\n".join(done.stderr.splitlines()[-10:])
            raise SystemExit(f"instructions: {bench_id} failed under valgrind:\n{tail}")
        totals = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.MULTILINE)
        if not totals:
            raise SystemExit(f"instructions: no total in callgrind's output for {bench_id}")
        return int(totals.group(1)) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="pairs whose label contains this")
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--json", type=Path, help="write the counts here")
    parser.add_argument("--compare", type=Path, help="counts written earlier by --json")
    parser.add_argument(
        "--check",
        action="store_true",
        help="PASS/MISS for each target the pairs measure; exit 1 on any MISS",
    )
    parser.add_argument(
        "--from",
        dest="from_",
        type=Path,
        help="counts written earlier by --json, instead of counting again",
    )
    args = parser.parse_args()
    pairs = [p for p in PAIRS if args.only in p.label]
    counts: dict[str, float] = {}
    if args.from_:
        counts = json.loads(args.from_.read_text())
        pairs = [p for p in pairs if p.bare in counts and p.layer in counts]
    else:
        if shutil.which("valgrind") is None:
            raise SystemExit("instructions: valgrind is not installed (apt-get install valgrind)")
        exe = bench_binary("instructions")
        for pair in pairs:
            for bench_id in (pair.bare, pair.layer):
                if bench_id not in counts:
                    counts[bench_id] = count(exe, bench_id, args.requests)
                    print(f"  {bench_id}: {counts[bench_id]:,.0f}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(counts, indent=2) + "\n")
    before = json.loads(args.compare.read_text()) if args.compare else {}

    header = "| pair | bare | layer | ratio | layer adds |"
    rule = "|---|--:|--:|--:|--:|"
    if before:
        header += " before: ratio | before: layer adds | layer, after − before |"
        rule += "--:|--:|--:|"
    print(f"Instructions per request ({args.requests:,} requests per id, callgrind)\n")
    print(header)
    print(rule)
    for pair in pairs:
        bare, layer = counts[pair.bare], counts[pair.layer]
        row = f"| `{pair.label}` | {bare:,.0f} | {layer:,.0f} | {layer / bare:.3f} | {layer - bare:+,.0f} |"
        if before and pair.bare in before and pair.layer in before:
            b_bare, b_layer = before[pair.bare], before[pair.layer]
            row += (
                f" {b_layer / b_bare:.3f} | {b_layer - b_bare:+,.0f} |"
                f" {layer - b_layer:+,.0f} ({(layer - b_layer) / b_layer:+.1%}) |"
            )
        elif before:
            row += " | | |"
        print(row)
    if args.check:
        sys.exit(0 if check(pairs, counts) else 1)


def check(pairs: list, counts: dict[str, float]) -> bool:
    """Prints PASS or MISS for each target that `pairs` measure; whether every one passed."""
    by_label = {pair.label: pair for pair in pairs}
    print("\nTargets (issue #29: the layer's share, layered minus bare)\n")
    passed = True
    for request, most, labels in TARGETS:
        for label in labels:
            pair = by_label.get(label)
            if pair is None:
                continue
            adds = counts[pair.layer] - counts[pair.bare]
            verdict = "PASS" if adds <= most else "MISS"
            passed &= verdict == "PASS"
            print(f"{verdict}  {request} (`{label}`): {adds:+,.0f} (target <= +{most:,})")
    return passed


if __name__ == "__main__":
    main()
