#!/usr/bin/env python3
"""Issue #38's "no caller waits for another's tool", measured over real sockets: 8 callers at
once, each on its own connection, each calling a tool that takes 1 s, through `elicitation-proxy`
in front of a 2025-era stdio server (`tests/upstream/slow_server.py`, which answers its calls
concurrently). The wall time until the last caller has its answer, for three configurations:

- `server_questions = "relay"`, `sessions = 1`: the server may ask, so a call holds the
  session's floor: the calls run one after another (the baseline, about 8 s);
- `server_questions = "off"`, `sessions = 1`: the server is told it cannot ask, no floor;
- `server_questions = "relay"`, `sessions = 8`: a pool of 8 children, each with its floor.

Each run also says how many calls the server(s) had running at once (the tool's own count), so a
fast run that did not overlap, or a slow one that did, shows. A report, not a test: the tests
(`tests/services/upstream_concurrency.rs`, `upstream_pool.rs`, `proxy/tests/pool.rs`) check the
overlap by count, never by time.

    python3 scripts/slow_calls.py --proxy target/release/elicitation-proxy
    python3 scripts/slow_calls.py --proxy … --callers 8 --seconds 1 --era 2025
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_bench import Http, free_port, wait_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "upstream" / "slow_server.py"
CASES = [("relay", 1), ("off", 1), ("relay", 8)]


def run_case(proxy: str, questions: str, sessions: int, callers: int, seconds: float,
             era: str, work: Path) -> tuple[float, int]:
    """The wall time of `callers` concurrent calls, and the most the server(s) ran together."""
    together = work / f"together-{questions}-{sessions}"
    together.mkdir()
    port = free_port()
    config = work / f"proxy-{questions}-{sessions}.toml"
    config.write_text(f"""[upstream]
command = {json.dumps([sys.executable, str(SERVER)])}
server_questions = "{questions}"
sessions = {sessions}

[listen]
http = "127.0.0.1:{port}"

[state]
ephemeral_keys = true
""")
    log = open(work / f"proxy-{questions}-{sessions}.log", "wb")
    proc = subprocess.Popen([proxy, "--config", str(config)], stdout=subprocess.DEVNULL,
                            stderr=log, env=dict(os.environ, RUST_LOG="warn"))
    try:
        wait_port(port, proc)
        clients = [Http(port, era) for _ in range(callers)]
        name = next(t["name"] for t in clients[0].request("tools/list", {})["result"]["tools"]
                    if t["name"].endswith("sleep"))
        arguments = {"seconds": seconds, "together": str(together)}
        results: list[dict] = [{}] * callers
        start = threading.Barrier(callers + 1)

        def call(i: int) -> None:
            start.wait()
            results[i] = clients[i].request("tools/call", {"name": name, "arguments": arguments})

        threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
        most = 0
        for reply in results:
            result = reply.get("result") or {}
            if result.get("isError") or "content" not in result:
                raise RuntimeError(f"a call failed: {json.dumps(reply)[:300]}")
            said = json.loads(result["content"][0]["text"])
            most = max(most, said.get("together", 0))
        return elapsed, most
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proxy", required=True, help="the elicitation-proxy binary")
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.0, help="how long each call takes")
    parser.add_argument("--era", choices=["2026", "2025"], default="2026",
                        help="the callers' protocol (2025: a session each, through the bridge)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="slow-calls."))
    try:
        print(f"# {args.callers} callers at once ({args.era} clients), each calling a tool that "
              f"takes {args.seconds:g} s (tests/upstream/slow_server.py, 2025-era, stdio)")
        print()
        print("| `server_questions` | `sessions` | all answered after | ÷ one call | "
              "most calls running together |")
        print("|---|--:|--:|--:|--:|")
        for questions, sessions in CASES:
            elapsed, most = run_case(args.proxy, questions, sessions, args.callers,
                                     args.seconds, args.era, work)
            print(f"| `{questions}` | {sessions} | {elapsed:.2f} s | "
                  f"{elapsed / args.seconds:.2f} | {most} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
