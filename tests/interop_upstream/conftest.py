"""Fixtures shared by the upstream interop tests (`test_upstream.py`, mcp 2.3.0, and
`legacy/test_legacy_upstream.py`, mcp 1.30.0): `front` (tools/src/bin/front.rs: the upstream
adapter, `ElicitationLayer` and the legacy bridge over HTTP) started in front of each real
server that `scripts/upstream-servers.sh` installs under `.cache/upstream`, on a free loopback
port, and stopped at the end.

Standard library only: both virtualenvs import it.

Environment: `FRONT_BIN` (the `front` binary; default `target/debug/front`, or
`$CARGO_TARGET_DIR/debug/front`), `MCP_UPSTREAM_RMCP` (the rmcp 2025-era stdio server
`upstream-rmcp`) and `DEPLOY_BARE_BIN` (the deploy example's bare rmcp 2026 service over HTTP,
`deploy-bare`), both by default next to `front`'s default, `FRONT_RUST_LOG` (front's RUST_LOG, default `info`: a test reads the upstream's stderr in it; its log is
attached to the report of a failed test).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "upstream"
NODE_MODULES = CACHE / "node_modules" / "@modelcontextprotocol"
FILESYSTEM_JS = NODE_MODULES / "server-filesystem" / "dist" / "index.js"
EVERYTHING_JS = NODE_MODULES / "server-everything" / "dist" / "index.js"
UPSTREAM_PYTHON = CACHE / "venv" / "bin" / "python"
ELICIT_SERVER = ROOT / "tests" / "upstream" / "elicit_server.py"
START_TIMEOUT_S = 60.0


def tools_bin(name: str, variable: str) -> Path:
    """The `tools` binary `name`: `$variable`, else `$CARGO_TARGET_DIR/debug/name`."""
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not target.is_absolute():
        target = ROOT / target
    return target / "debug" / name


def front_bin() -> Path:
    return tools_bin("front", "FRONT_BIN")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process(process: subprocess.Popen, grace_s: float = 5.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace_s)


def require(path: Path, what: str) -> None:
    if not path.exists():
        pytest.fail(f"{what} is not installed ({path} is missing): run scripts/upstream-servers.sh")


# Every `front` (and HTTP upstream) running now: a failed test gets their logs in its report.
RUNNING: list["Front"] = []


class Front:
    """`front [ARGS]` on a free loopback port; `url` is its `/mcp` endpoint."""

    def __init__(self, name: str, args: list[str], workdir: Path) -> None:
        binary = front_bin()
        if not binary.exists():
            pytest.fail(f"no front binary at {binary} (build it: cargo build -p tower-elicitation-tools --bin front; or set FRONT_BIN)")
        self.name = name
        self.log_path = workdir / f"front-{name}-{time.monotonic_ns()}.log"
        env = dict(os.environ, RUST_LOG=os.environ.get("FRONT_RUST_LOG", "info"))
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [str(binary), "--listen", "127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=ROOT,
        )
        self.url = self._read_url()
        RUNNING.append(self)
        self._wait_ready()

    def _read_url(self) -> str:
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        first = line[0].decode().strip() if line else ""
        if not first.startswith("listening on "):
            self.stop()
            pytest.fail(f"front {self.name} did not start (first line {first!r}); its log:\n{self.log()}")
        return first.removeprefix("listening on ")

    def _wait_ready(self) -> None:
        """Until `tools/list` answers with tools: the upstream is up and through its handshake."""
        deadline = time.monotonic() + START_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                reply = post_json(self.url, rpc("tools/list", {}), timeout=10)
                if reply.get("result", {}).get("tools"):
                    return
                last = json.dumps(reply)
            except Exception as error:  # noqa: BLE001 (retried until the deadline)
                last = repr(error)
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"front {self.name} never listed tools (last: {last}); its log:\n{self.log()}")

    def log(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-tail:])

    def stop(self) -> None:
        stop_process(self.process)
        if self.process.stdout:
            self.process.stdout.close()
        self._log.close()
        if self in RUNNING:
            RUNNING.remove(self)


class HttpUpstream:
    """A server on a free loopback port of its own (`command(port)`), until it takes connections."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], port: int, workdir: Path) -> None:
        self.name = name
        self.port = port
        self.log_path = workdir / f"{name}-{port}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=dict(os.environ, **env), cwd=ROOT
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"{name} did not listen on {port}: {self.log_path.read_text(errors='replace')[-2000:]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


def rpc(method: str, params: dict, id_: int = 0, capabilities: dict | None = None) -> dict:
    """A 2026-07-28 JSON-RPC request (the per-request `_meta` the layer reads)."""
    params = dict(params)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities if capabilities is not None else {},
        "io.modelcontextprotocol/clientInfo": {"name": "interop-upstream", "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def post_json(url: str, body: dict, headers: dict[str, str] | None = None, timeout: float = 30) -> dict:
    """POSTs one 2026-07-28 request; the JSON-RPC reply (`application/json` or one SSE event)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": body["method"],
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (loopback)
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        text = error.read().decode()
    return parse_reply(text)


def parse_reply(text: str) -> dict:
    text = text.strip()
    if not text.startswith("{"):
        # An event stream: the response is the event with an id (notifications come before it).
        data = [line[len("data:") :].strip() for line in text.splitlines() if line.startswith("data:")]
        events = [json.loads(d) for d in data if d.startswith("{")]
        return next(e for e in events if "id" in e)
    return json.loads(text)


# --- fixtures ------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="interop-upstream."))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def fs_dir(workdir: Path) -> Path:
    """The one directory server-filesystem may touch (real path: the server resolves links)."""
    path = Path(tempfile.mkdtemp(prefix="fs.", dir=workdir)).resolve()
    return path


@pytest.fixture(scope="module")
def filesystem(fs_dir: Path, workdir: Path) -> Iterator[Front]:
    """server-filesystem (stdio) behind `front --gate write_file`."""
    require(FILESYSTEM_JS, "server-filesystem")
    front = Front("filesystem", ["--gate", "write_file", "--", "node", str(FILESYSTEM_JS), str(fs_dir)], workdir)
    yield front
    front.stop()


@pytest.fixture(scope="module", params=["stdio", "http"])
def everything(request: pytest.FixtureRequest, workdir: Path) -> Iterator[Front]:
    """server-everything behind `front`: as its stdio child, or over its Streamable HTTP mode."""
    require(EVERYTHING_JS, "server-everything")
    if request.param == "stdio":
        front = start_everything_stdio(workdir)
        # server-everything asks `roots/list` 350 ms after `notifications/initialized`, on its
        # own (syncRoots), for no call. test_upstream.py shows that a call running then is not
        # hurt by it; the other tests start after it, as a host's first call usually does.
        time.sleep(1.0)
        yield front
        front.stop()
        return
    port = free_port()
    server = HttpUpstream("everything-http", ["node", str(EVERYTHING_JS), "streamableHttp"], {"PORT": str(port)}, port, workdir)
    try:
        front = Front("everything-http", ["--url", server.url], workdir)
        yield front
        front.stop()
    finally:
        server.stop()


def start_everything_stdio(workdir: Path) -> Front:
    require(EVERYTHING_JS, "server-everything")
    return Front("everything-stdio", ["--", "node", str(EVERYTHING_JS), "stdio"], workdir)


@pytest.fixture
def fresh_everything_stdio(workdir: Path) -> Iterator[Front]:
    """server-everything (stdio) behind a `front` of its own, used right after its handshake."""
    front = start_everything_stdio(workdir)
    yield front
    front.stop()


def start_fastmcp(workdir: Path) -> Front:
    require(UPSTREAM_PYTHON, "the Python mcp 1.x venv")
    return Front("fastmcp", ["--", str(UPSTREAM_PYTHON), str(ELICIT_SERVER)], workdir)


@pytest.fixture(scope="module")
def fastmcp(workdir: Path) -> Iterator[Front]:
    """tests/upstream/elicit_server.py (FastMCP, stdio) behind `front`, shared by a module."""
    front = start_fastmcp(workdir)
    yield front
    front.stop()


@pytest.fixture
def fresh_fastmcp(workdir: Path) -> Iterator[Front]:
    """The same, for one test alone (one that crashes the child or floods the adapter)."""
    front = start_fastmcp(workdir)
    yield front
    front.stop()


@pytest.fixture(scope="module")
def rmcp_stdio(workdir: Path) -> Iterator[Front]:
    """`upstream-rmcp` (rmcp 3.11, 2025-era, stdio: `book` asks seats 1..8; `echo`) behind `front`."""
    binary = tools_bin("upstream-rmcp", "MCP_UPSTREAM_RMCP")
    if not binary.exists():
        pytest.fail(
            f"no upstream-rmcp binary at {binary} (run scripts/upstream-servers.sh; or set MCP_UPSTREAM_RMCP)"
        )
    front = Front("rmcp-stdio", ["--", str(binary)], workdir)
    yield front
    front.stop()


@pytest.fixture(scope="module", params=["sse", "json"])
def deploy_http(request: pytest.FixtureRequest, workdir: Path) -> Iterator[Front]:
    """The deploy example's bare rmcp 2026-07-28 service (`deploy-bare`, over HTTP, replying with
    event streams or JSON) behind `front --url`: no gate, the handler asks its own question."""
    binary = tools_bin("deploy-bare", "DEPLOY_BARE_BIN")
    if not binary.exists():
        pytest.fail(
            f"no deploy-bare binary at {binary} (cargo build -p tower-elicitation-tools --bin deploy-bare; or set DEPLOY_BARE_BIN)"
        )
    port = free_port()
    command = [str(binary), "--listen", f"127.0.0.1:{port}"] + (["--json"] if request.param == "json" else [])
    server = HttpUpstream(f"deploy-bare-{request.param}", command, {}, port, workdir)
    try:
        front = Front(f"deploy-{request.param}", ["--url", server.url], workdir)
        yield front
        front.stop()
    finally:
        server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for front in RUNNING:
            report.sections.append((f"front {front.name} log (last lines)", front.log()))
