#!/usr/bin/env python3
"""The MAC at its native cost: `benches/mac.rs` (HMAC-SHA256 over a first round's token text).

Runs the bench's one benchmark, short, and reads criterion's median of it. Under valgrind
`sha2` runs its portable code, so `scripts/instructions.py` counts the layer's work with SHA-256
compression taken out; this holds the MAC itself, in time, on this machine (issue #41).

    python3 scripts/mac_bench.py            # build, measure, the median and the bench's lines
    python3 scripts/mac_bench.py --check    # ... and PASS/MISS on the target; exit 1 on MISS

About 10 seconds after the build (1 s warm-up, 3 s measurement). By default criterion measures
the CPU time of the bench's thread (BENCH_CLOCK=cpu, as `bench_report.py`), which leaves out the
time it waits for a core other processes hold; `--clock wall` measures wall-clock time.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import bench_binary  # noqa: E402  (cargo bench --no-run, the executable)

ROOT = Path(__file__).resolve().parent.parent
BENCH = "mac"
ID = "mac/hmac_sha256/first_round"
# Issue #41: the MAC of a first round's token, at most this long on the machine the project runs
# on (which has SHA extensions).
TARGET_NS = 1_500.0
HOME = ROOT / "target" / "mac_bench" / "criterion"


def median_ns(home: Path) -> float:
    """criterion's median for `ID` from its last run under `home`."""
    for meta_path in home.glob("**/new/benchmark.json"):
        meta = json.loads(meta_path.read_text())
        if meta.get("full_id") == ID:
            estimates = json.loads(meta_path.with_name("estimates.json").read_text())
            return float(estimates["median"]["point_estimate"])
    raise SystemExit(f"mac_bench: criterion wrote no result for {ID}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="PASS/MISS; exit 1 on MISS")
    parser.add_argument("--warm-up", type=float, default=1.0, help="seconds")
    parser.add_argument("--measurement", type=float, default=3.0, help="seconds")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: the bench thread's CPU time (default, as bench_report.py); wall: wall clock",
    )
    args = parser.parse_args()
    exe = bench_binary(BENCH)
    done = subprocess.run(
        [
            str(exe),
            "--bench",
            "--exact",
            ID,
            "--warm-up-time",
            str(args.warm_up),
            "--measurement-time",
            str(args.measurement),
            "--noplot",
        ],
        cwd=ROOT,
        env=dict(os.environ, CRITERION_HOME=str(HOME), BENCH_CLOCK=args.clock),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"mac_bench: the bench failed ({done.returncode})")
    for line in done.stdout.splitlines():
        if line.startswith("mac: "):
            print(line)
    median = median_ns(HOME)
    print(f"{ID}: median {median:,.0f} ns ({args.clock} clock)")
    if args.check:
        verdict = "PASS" if median <= TARGET_NS else "MISS"
        print(
            f"{verdict}  HMAC-SHA256 over a first round's token: {median / 1000:.2f} µs"
            f" (target <= {TARGET_NS / 1000:.1f} µs)"
        )
        sys.exit(0 if verdict == "PASS" else 1)


if __name__ == "__main__":
    main()
