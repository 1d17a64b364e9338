#!/usr/bin/env python3
"""Instructions per request, pair by pair: `benches/instructions.rs` under callgrind.

The pairs are `bench_report.py`'s. Each benchmark id runs once under
`valgrind --tool=callgrind`, collecting only inside the measured requests, so the count is the
same from run to run whatever else the machine does (to within a few instructions per request:
hash seeds differ). What it says: how much work the layer adds, and whether a change added or
removed work. What it does not say: time (a cache miss is one instruction), and the MAC's share
(under valgrind `sha2` runs its portable code, not the CPU's SHA extensions).

So each id is also counted inside SHA-256's compression alone (callgrind's inclusive cost of
`SHA256_COMPRESS`), kept as `"<id>:sha256"` beside `"<id>"` in `--json`, and the targets
(issue #41) apply to what the layer adds with it taken out:
`(layer - layer:sha256) - (bare - bare:sha256)`. The MAC's native cost is held apart, in time,
by `benches/mac.rs` (`scripts/mac_bench.py --check`).

    python3 scripts/instructions.py                          # build, count, table
    python3 scripts/instructions.py --json target/instr.json # ... and keep the counts
    python3 scripts/instructions.py --compare before.json    # ... beside counts kept earlier
    python3 scripts/instructions.py --only rmcp              # pairs whose label contains `rmcp`
    python3 scripts/instructions.py --check                  # ... and PASS/MISS per target (issue #29)

About 2 minutes after the build (22 ids, 1,000 requests each). Needs valgrind (Debian's
`valgrind`). Standard library only. `--compare` reads files
written before the SHA-256 counts existed (their SHA-256 figures show as n/a).
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

# SHA-256's compression function in `sha2` 0.11, as callgrind names it: the public
# `compress256` (`src/sha256.rs`), which picks the backend (the portable `soft::compress` under
# valgrind, which hides the CPU's SHA extensions) and runs it over the blocks. Every SHA-256 the
# layer or the inner service computes goes through it: the HMAC of each seal and open, the
# principal and session tags. Its inclusive cost is the instructions spent compressing blocks;
# the padding, buffering and HMAC bookkeeping around it stay in the counts. Seen in a callgrind
# output of `instructions echo/layer/call_first`; its only callee there is `soft::compress`.
SHA256_COMPRESS = "sha2::sha256::compress256"
SHA256 = ":sha256"  # the key suffix of an id's SHA-256 count in --json

# The targets of issue #29, in issue #41's currency: the most instructions the layer may add to a
# request with SHA-256 compression excluded (`adds_without_sha256`), by what the request is,
# with the pairs that stand for it.
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


def count(exe: Path, bench_id: str, requests: int) -> tuple[float, float]:
    """Instructions per measured request of `bench_id`: in all, and inside `SHA256_COMPRESS`."""
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
        return int(totals.group(1)) / requests, inclusive(out, SHA256_COMPRESS) / requests


def inclusive(out: Path, symbol: str) -> int:
    """Callgrind's inclusive cost of the function `symbol` in the output file `out` (0 if it
    never ran): every cost line recorded while `fn=` names it, its own instructions and those of
    the calls it makes (`calls=` lines), whatever file (`fl=`, `fi=`, `fe=`) each line's
    instructions came from. (`callgrind_annotate --inclusive=yes` gives the same total, but split
    by the file each inlined piece came from, each piece with the calls; summed, they count twice.)
    Not for a recursive function: its calls to itself would count again."""
    names: dict[str, str] = {}
    current = None
    total = 0
    with out.open() as lines:
        for line in lines:
            if line.startswith("fn="):
                current = name_of(line[3:].rstrip("\n"), names)
            elif line.startswith("cfn="):
                name_of(line[4:].rstrip("\n"), names)
            elif current == symbol and line[:1] in "0123456789+-*":
                fields = line.split()
                if len(fields) > 1:
                    total += int(fields[1])
    return total


def name_of(spec: str, names: dict[str, str]) -> str:
    """The name a `fn=`/`cfn=` spec gives: `(id) name` defines `id`, `(id)` refers to it."""
    if spec.startswith("("):
        id_, _, name = spec[1:].partition(")")
        name = name.strip()
        if name:
            names[id_] = name
        return names.get(id_, "")
    return spec


def adds_without_sha256(counts: dict[str, float], pair) -> float | None:
    """`(layer - layer:sha256) - (bare - bare:sha256)`; None without the SHA-256 counts."""
    keys = (pair.layer + SHA256, pair.bare + SHA256)
    if not all(key in counts for key in keys):
        return None
    layer = counts[pair.layer] - counts[pair.layer + SHA256]
    bare = counts[pair.bare] - counts[pair.bare + SHA256]
    return layer - bare


def signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+,.0f}"


def plain(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


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
                    counts[bench_id], counts[bench_id + SHA256] = count(
                        exe, bench_id, args.requests
                    )
                    print(
                        f"  {bench_id}: {counts[bench_id]:,.0f}"
                        f" (SHA-256 compression {counts[bench_id + SHA256]:,.0f})",
                        file=sys.stderr,
                    )
        sealing = [p.layer for p in pairs if p.layer.endswith("/layer/call_first")]
        if sealing and not any(counts[bench_id + SHA256] for bench_id in sealing):
            raise SystemExit(
                f"instructions: no instructions inside {SHA256_COMPRESS} in a first round that"
                " seals a token: has sha2 renamed it, or inlined it? (see SHA256_COMPRESS)"
            )
    if args.json:
        args.json.write_text(json.dumps(counts, indent=2) + "\n")
    before = json.loads(args.compare.read_text()) if args.compare else {}

    header = (
        "| pair | bare | layer | ratio | layer adds"
        " | bare: SHA-256 | layer: SHA-256 | layer adds, SHA-256 excluded |"
    )
    rule = "|---|--:|--:|--:|--:|--:|--:|--:|"
    if before:
        header += (
            " before: ratio | before: layer adds | before: adds, SHA-256 excluded"
            " | layer, after − before |"
        )
        rule += "--:|--:|--:|--:|"
    print(f"Instructions per request ({args.requests:,} requests per id, callgrind)\n")
    print(header)
    print(rule)
    for pair in pairs:
        bare, layer = counts[pair.bare], counts[pair.layer]
        row = (
            f"| `{pair.label}` | {bare:,.0f} | {layer:,.0f} | {layer / bare:.3f}"
            f" | {layer - bare:+,.0f} | {plain(counts.get(pair.bare + SHA256))}"
            f" | {plain(counts.get(pair.layer + SHA256))}"
            f" | {signed(adds_without_sha256(counts, pair))} |"
        )
        if before and pair.bare in before and pair.layer in before:
            b_bare, b_layer = before[pair.bare], before[pair.layer]
            row += (
                f" {b_layer / b_bare:.3f} | {b_layer - b_bare:+,.0f} |"
                f" {signed(adds_without_sha256(before, pair))} |"
                f" {layer - b_layer:+,.0f} ({(layer - b_layer) / b_layer:+.1%}) |"
            )
        elif before:
            row += " | | | |"
        print(row)
    if args.check:
        sys.exit(0 if check(pairs, counts) else 1)


def check(pairs: list, counts: dict[str, float]) -> bool:
    """Prints, for each target that `pairs` measure, what the layer adds (in all, and with
    SHA-256 compression excluded) and PASS or MISS on the latter; whether every one passed."""
    by_label = {pair.label: pair for pair in pairs}
    print(
        "\nTargets (issue #41: the layer's share, layered minus bare, SHA-256 compression"
        f" excluded: `{SHA256_COMPRESS}` inclusive)\n"
    )
    passed = True
    for request, most, labels in TARGETS:
        for label in labels:
            pair = by_label.get(label)
            if pair is None:
                continue
            adds = counts[pair.layer] - counts[pair.bare]
            excluded = adds_without_sha256(counts, pair)
            if excluded is None:
                verdict, why = "MISS", " (no SHA-256 counts in these counts: count again)"
            else:
                verdict, why = ("PASS" if excluded <= most else "MISS"), ""
            passed &= verdict == "PASS"
            print(
                f"{verdict}  {request} (`{label}`): {signed(excluded)} SHA-256 excluded,"
                f" {adds:+,.0f} in all (target <= +{most:,} SHA-256 excluded){why}"
            )
    return passed


if __name__ == "__main__":
    main()
