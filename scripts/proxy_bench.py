#!/usr/bin/env python3
"""What `elicitation-proxy` adds in front of a real server, beside `mcp-proxy` (crates.io,
Tower-based) in front of the same server, and the server reached directly, in one run.

The upstream is the pinned `@modelcontextprotocol/server-filesystem` (Node, stdio). The paths:

- **direct**: this script is the server's stdio client (`initialize` once, newline-delimited
  JSON-RPC, a reader thread routing responses by id);
- **elicitation-proxy, 2026**: POSTs of MCP 2026-07-28 requests (no session), JSON answers;
- **elicitation-proxy, 2025**: the same proxy through its bridge, a 2025-11-25 session
  (`initialize`, `Mcp-Session-Id`);
- **mcp-proxy 0.6.0**: a 2025-11-25 session, the server as its stdio backend.

The operations: `read` (`read_text_file` of a small file: no gate anywhere) and `write`
(`write_file`: gated on elicitation-proxy, so a flow there is the call answered `input_required`
and the retry with the approval; one call on the other paths).

Latency: `--rounds` rounds; in each, every path does a batch of `--batch` sequential calls on one
keep-alive connection, the path that goes first turning each round (interleaved, so the
machine's other load falls on every path alike). Every call is timed by the wall clock; p50 and
p99 are over all of a path's calls. CPU: utime + stime from /proc/PID/stat of the front process
(the proxy) and of the server process (its child, or this script's), summed over the batches
and divided by the calls. Throughput: `--concurrency` threads, each on its own connection (the
direct path: requests in flight together on the one pipe), `--tput-calls` calls in all per run,
`--tput-runs` runs per path, interleaved; the median.

Prints Markdown tables. Standard library only. Run by scripts/proxy_bench.sh, which builds and
installs everything.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TICK_US = 1_000_000 / os.sysconf("SC_CLK_TCK")
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    "io.modelcontextprotocol/clientInfo": {"name": "proxy-bench", "version": "0"},
}


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


def descendant_node(pid: int) -> int:
    """The server's node process under `pid` (through an npx or shell, if any)."""
    queue = [pid]
    while queue:
        current = queue.pop(0)
        for child in children(current):
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if cmd and cmd[0].endswith(b"node") and any(b"server-filesystem" in a for a in cmd):
                return child
            queue.append(child)
    raise RuntimeError(f"no server-filesystem node process under {pid}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def parse_reply(body: bytes, content_type: str) -> dict:
    text = body.decode()
    if "text/event-stream" in content_type:
        for line in text.splitlines():
            if line.startswith("data:"):
                # A priming event's `data:` is empty: no message.
                event = json.loads(line[5:].strip() or "{}")
                if "id" in event and "method" not in event:
                    return event
        raise RuntimeError(f"no response in the event stream: {text[:300]}")
    return json.loads(text)


# --- clients ---------------------------------------------------------------------------------


class Stdio:
    """The server's own stdio client: any number of requests in flight, routed by id."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.pid = self.process.pid
        self.lock = threading.Lock()
        self.waiting: dict[int, list] = {}
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "proxy-bench", "version": "0"}})
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict) -> None:
        line = (json.dumps(message) + "\n").encode()
        with self.lock:
            self.process.stdin.write(line)
            self.process.stdin.flush()

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            if "id" in message and "method" not in message:
                slot = self.waiting.pop(message["id"])
                slot[1] = message
                slot[0].set()

    def request(self, method: str, params: dict) -> dict:
        slot = [threading.Event(), None]
        with self.lock:
            self.next_id += 1
            ident = self.next_id
            self.waiting[ident] = slot
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        if not slot[0].wait(30):
            raise RuntimeError(f"no answer to {method}")
        return slot[1]

    def connection(self) -> "Stdio":
        return self

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


class Http:
    """One keep-alive connection to an MCP endpoint; `era` 2026 (per-request `_meta`) or 2025
    (a session of its own)."""

    def __init__(self, port: int, era: str, path: str = "/mcp") -> None:
        self.port = port
        self.era = era
        self.path = path
        self.version = "2025-11-25"
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.session: str | None = None
        self.ident = 0
        if era == "2025":
            reply, headers = self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "proxy-bench", "version": "0"}}})
            self.session = headers.get("mcp-session-id")
            self.version = reply["result"]["protocolVersion"]
            self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _post(self, message: dict) -> tuple[dict, dict]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.era == "2026":
            headers["MCP-Protocol-Version"] = "2026-07-28"
            headers["Mcp-Method"] = message["method"]
            if message["method"] == "tools/call":
                headers["Mcp-Name"] = message["params"]["name"]
        else:
            headers["MCP-Protocol-Version"] = self.version
            if self.session:
                headers["Mcp-Session-Id"] = self.session
        response = self._send("conn", headers, json.dumps(message))
        body = response.read()
        got = {k.lower(): v for k, v in response.getheaders()}
        if "id" not in message:
            return {}, got
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {body[:300]!r}")
        return parse_reply(body, got.get("content-type", "")), got

    def _send(self, which: str, headers: dict, body: str) -> http.client.HTTPResponse:
        """POSTs on the connection `which`; a new one when the server closed it while idle
        (between the phases)."""
        conn = getattr(self, which)
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            return conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            setattr(self, which, conn)
            conn.request("POST", self.path, body=body, headers=headers)
            return conn.getresponse()

    def request(self, method: str, params: dict) -> dict:
        self.ident += 1
        if self.era == "2026":
            params = dict(params, _meta=META)
        return self._post({"jsonrpc": "2.0", "id": self.ident, "method": method, "params": params})[0]

    def connection(self) -> "Http":
        return Http(self.port, self.era, self.path)

    def bridged_call(self, params: dict, answer: dict, legs: list[float] | None) -> dict:
        """A 2025-era `tools/call` whose event stream carries an `elicitation/create`: answered with
        `answer` in a POST of its own (another connection, the same session), then the result read
        from the stream."""
        if not hasattr(self, "answers"):
            self.answers = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.ident += 1
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": self.session}
        start = time.perf_counter_ns()
        response = self._send("conn", headers, json.dumps(
            {"jsonrpc": "2.0", "id": self.ident, "method": "tools/call", "params": params}))
        asked = False
        while True:
            line = response.readline()
            if not line:
                raise RuntimeError("the event stream ended without a response")
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if not data:
                # A priming event (`data:` with nothing after it, for `Last-Event-ID`): no message.
                continue
            event = json.loads(data)
            if event.get("method") == "elicitation/create" and not asked:
                asked = True
                if legs is not None:
                    legs.append((time.perf_counter_ns() - start) / 1000)
                reply = self._send("answers", headers, json.dumps(
                    {"jsonrpc": "2.0", "id": event["id"], "result": answer}))
                reply.read()
                if reply.status != 202:
                    raise RuntimeError(f"the answer was taken with HTTP {reply.status}")
            elif event.get("id") == self.ident and "method" not in event:
                response.read()
                if not asked:
                    raise RuntimeError(f"not asked: {json.dumps(event)[:300]}")
                return event

    def close(self) -> None:
        self.conn.close()
        if hasattr(self, "answers"):
            self.answers.close()


def check_ok(reply: dict, what: str) -> dict:
    result = reply.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        raise RuntimeError(f"{what}: {json.dumps(reply)[:400]}")
    return result


# --- the paths -------------------------------------------------------------------------------


class Path_:
    """A way to the server: its client, the front's PID (None for direct), the server's PID."""

    def __init__(self, name: str, client, front_pid: int | None, server_pid: int, tools: dict[str, str],
                 gated: bool) -> None:
        self.name = name
        self.client = client
        self.front_pid = front_pid
        self.server_pid = server_pid
        self.tools = tools
        self.gated = gated

    def read(self, conn, data: Path) -> None:
        reply = conn.request("tools/call", {"name": self.tools["read"], "arguments": {"path": str(data / "hello.txt")}})
        result = check_ok(reply, f"{self.name} read")
        if "Hello" not in json.dumps(result):
            raise RuntimeError(f"{self.name} read: {json.dumps(result)[:300]}")

    def write(self, conn, data: Path, legs: list[float] | None = None) -> None:
        """A write_file; through a gate: the call, its `input_required`, the approved retry."""
        args = {"path": str(data / f"w-{self.name.replace(' ', '-')}.txt"), "content": "bench\n"}
        params = {"name": self.tools["write"], "arguments": args}
        if self.gated == "2025":
            reply = conn.bridged_call(params, {"action": "accept", "content": {"approve": True}}, legs)
            result = check_ok(reply, f"{self.name} write")
            if "Successfully wrote" not in json.dumps(result):
                raise RuntimeError(f"{self.name} write: {json.dumps(result)[:300]}")
            return
        start = time.perf_counter_ns()
        reply = conn.request("tools/call", params)
        if self.gated:
            result = reply.get("result", {})
            if result.get("resultType") != "input_required":
                raise RuntimeError(f"{self.name} write not asked: {json.dumps(reply)[:300]}")
            asked = time.perf_counter_ns()
            retry = dict(params, requestState=result["requestState"], inputResponses={
                "approval": {"action": "accept", "content": {"approve": True}}})
            reply = conn.request("tools/call", retry)
            if legs is not None:
                legs.append((asked - start) / 1000)
        result = check_ok(reply, f"{self.name} write")
        if "Successfully wrote" not in json.dumps(result):
            raise RuntimeError(f"{self.name} write: {json.dumps(result)[:300]}")

    def cpu(self) -> tuple[int, int]:
        front = cpu_ticks(self.front_pid) if self.front_pid else 0
        return front, cpu_ticks(self.server_pid)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "—"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def wait_port(port: int, process: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def list_tools(client) -> dict[str, str]:
    names = [t["name"] for t in check_ok(client.request("tools/list", {}), "tools/list")["tools"]]
    pick = lambda suffix: next(n for n in names if n == suffix or n.endswith(("/" + suffix, "_" + suffix, "." + suffix)))  # noqa: E731
    return {"read": pick("read_text_file"), "write": pick("write_file")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proxy", required=True, help="the elicitation-proxy binary")
    parser.add_argument("--mcp-proxy", required=True, help="the mcp-proxy 0.6.0 binary")
    parser.add_argument("--filesystem", required=True, help="server-filesystem's dist/index.js")
    parser.add_argument("--node", default=shutil.which("node") or "node")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tput-calls", type=int, default=2000)
    parser.add_argument("--tput-runs", type=int, default=3)
    parser.add_argument("--server-questions", choices=["off", "relay"], default="off",
                        help="the proxy's [upstream] server_questions (default off, as the shipped "
                             "filesystem config: the server asks nothing, so its calls run at once)")
    parser.add_argument("--short", action="store_true",
                        help="a few seconds (CI's run: the bench still works), not figures to quote")
    args = parser.parse_args()
    if args.short:
        args.rounds, args.batch, args.tput_calls, args.tput_runs = 2, 10, 200, 1

    work = Path(tempfile.mkdtemp(prefix="proxy-bench."))
    data = (work / "data").resolve()
    data.mkdir()
    (data / "hello.txt").write_text("Hello from the proxy bench.\n")
    server = [args.node, args.filesystem, str(data)]
    processes: list[subprocess.Popen] = []
    paths: list[Path_] = []
    try:
        # direct
        direct = Stdio(server)
        paths.append(Path_("direct", direct, None, direct.pid, list_tools(direct), gated=False))

        # elicitation-proxy
        port = free_port()
        (work / "proxy.toml").write_text(f"""[upstream]
command = {json.dumps(server)}
server_questions = "{args.server_questions}"

[listen]
http = "127.0.0.1:{port}"
# Every bench connection comes from 127.0.0.1: the default cap of 128 per peer would close the
# 64-connection runs' second connections (a 2025 flow's answers) and those kept from the latency runs.
max_connections_per_peer = 1024

[state]
ephemeral_keys = true

# The bench's connections are one anonymous caller, whom the default fair share (a quarter of
# the 64 requests in flight) would refuse from 17 connections on; mcp-proxy has no such bound.
[identity]
principal = "none"

[[gate]]
tools = ["write_file"]
message = "Write to {{path}}?"
form.approve = {{ type = "boolean", title = "Approve" }}
require = {{ approve = true }}
""")
        proc = subprocess.Popen([args.proxy, "--config", str(work / "proxy.toml")], stdout=subprocess.DEVNULL,
                                stderr=open(work / "proxy.log", "wb"), env=dict(os.environ, RUST_LOG="warn"))
        processes.append(proc)
        wait_port(port, proc)
        modern = Http(port, "2026")
        node_pid = descendant_node(proc.pid)
        paths.append(Path_("elicitation-proxy 2026", modern, proc.pid, node_pid, list_tools(modern), gated=True))
        legacy = Http(port, "2025")
        paths.append(Path_("elicitation-proxy 2025", legacy, proc.pid, node_pid, list_tools(legacy), gated="2025"))

        # mcp-proxy
        mport = free_port()
        (work / "mcp-proxy.toml").write_text(f"""[proxy]
name = "bench"
[proxy.listen]
host = "127.0.0.1"
port = {mport}

[[backends]]
name = "files"
transport = "stdio"
command = {json.dumps(args.node)}
args = {json.dumps(server[1:])}
""")
        mproc = subprocess.Popen([args.mcp_proxy, "--config", str(work / "mcp-proxy.toml")],
                                 stdout=subprocess.DEVNULL, stderr=open(work / "mcp-proxy.log", "wb"),
                                 env=dict(os.environ, RUST_LOG="warn"))
        processes.append(mproc)
        wait_port(mport, mproc)
        mcp = Http(mport, "2025", "/")  # tower-mcp's router serves MCP at its root
        tools = list_tools(mcp)
        paths.append(Path_("mcp-proxy 0.6.0", mcp, mproc.pid, descendant_node(mproc.pid), tools, gated=False))

        # Warm-up, and every path checked once.
        for path in paths:
            for _ in range(50):
                path.read(path.client, data)
            if path.gated is not None:
                for _ in range(20):
                    path.write(path.client, data)

        print(f"# proxy bench: {args.rounds} rounds x {args.batch} calls per path and operation, "
              f"interleaved; throughput {args.tput_runs} runs x {args.tput_calls} calls from "
              f"{args.concurrency} connections")
        for op in ("read", "write"):
            lat = {p.name: [] for p in paths}
            legs = {p.name: [] for p in paths}
            cpu = {p.name: [0, 0] for p in paths}
            active = [p for p in paths if op == "read" or p.gated is not None]
            for r in range(args.rounds):
                order = active[r % len(active):] + active[: r % len(active)]
                for path in order:
                    before = path.cpu()
                    for _ in range(args.batch):
                        start = time.perf_counter_ns()
                        if op == "read":
                            path.read(path.client, data)
                        else:
                            path.write(path.client, data, legs[path.name])
                        lat[path.name].append((time.perf_counter_ns() - start) / 1000)
                    after = path.cpu()
                    cpu[path.name][0] += after[0] - before[0]
                    cpu[path.name][1] += after[1] - before[1]
            tput = {p.name: [] for p in active}
            for run in range(args.tput_runs):
                for path in active[run % len(active):] + active[: run % len(active)]:
                    tput[path.name].append(throughput(path, op, data, args))
            base = next(p for p in active if p.name == "mcp-proxy 0.6.0")
            direct_p50 = statistics.median(lat["direct"])
            print()
            print(f"## {op}")
            print()
            print("| path | p50 | p99 | p50 added to direct | added ÷ mcp-proxy's | front CPU / call | "
                  "÷ mcp-proxy's | server CPU / call | calls/s | ÷ mcp-proxy's |")
            print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
            n = args.rounds * args.batch
            base_added = statistics.median(lat[base.name]) - direct_p50
            base_cpu = cpu[base.name][0] * TICK_US / n
            base_tput = statistics.median(tput[base.name])
            for path in active:
                p50 = statistics.median(lat[path.name])
                added = p50 - direct_p50
                front = cpu[path.name][0] * TICK_US / n
                rate = statistics.median(tput[path.name])
                print(f"| {path.name} | {p50:.0f} µs | {pct(lat[path.name], 99):.0f} µs | "
                      f"{added:.0f} µs | {ratio(added, base_added)} | "
                      f"{front:.0f} µs | {ratio(front, base_cpu)} | "
                      f"{cpu[path.name][1] * TICK_US / n:.0f} µs | {rate:,.0f} | {ratio(rate, base_tput)} |"
                      if path.front_pid else
                      f"| {path.name} | {p50:.0f} µs | {pct(lat[path.name], 99):.0f} µs | — | — | — | — | "
                      f"{cpu[path.name][1] * TICK_US / n:.0f} µs | {rate:,.0f} | {ratio(rate, base_tput)} |")
            if op == "write":
                for path in active:
                    if legs[path.name]:
                        what = ("the call until its `elicitation/create` arrives on the stream" if path.gated == "2025"
                                else "the call, answered `input_required` by the gate")
                        print(f"\n{path.name}: the first leg ({what}, no upstream) "
                              f"p50 {statistics.median(legs[path.name]):.0f} µs, "
                              f"p99 {pct(legs[path.name], 99):.0f} µs")
        print()
        print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")
        return 0
    finally:
        for path in paths:
            if isinstance(path.client, Http):
                path.client.close()
        if paths and isinstance(paths[0].client, Stdio):
            paths[0].client.close()
        for proc in processes:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


def throughput(path: Path_, op: str, data: Path, args) -> float:
    per = args.tput_calls // args.concurrency
    errors: list[BaseException] = []

    def worker() -> None:
        conn = path.client.connection()
        try:
            for _ in range(per):
                if op == "read":
                    path.read(conn, data)
                else:
                    path.write(conn, data)
        except BaseException as error:  # noqa: BLE001 (reported after the join)
            errors.append(error)
        finally:
            if conn is not path.client:
                conn.close()

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{path.name} {op} throughput: {errors[0]}")
    return per * args.concurrency / elapsed


if __name__ == "__main__":
    sys.exit(main())
