"""Fixtures of the proxy interop tests (`test_proxy.py`: the Python `mcp==2.3.0` client; the
TypeScript SDK 1.x client is `ts_client.mjs`, run by scripts/interop-proxy.sh): the
`elicitation-proxy` binary serving the shipped config, examples/proxy/filesystem.toml, with
only its directory and port changed, in front of server-filesystem, on a free loopback port.

Environment: `PROXY_BIN` (the binary; default `$CARGO_TARGET_DIR/release/elicitation-proxy`, or
`target/release/…`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "proxy" / "filesystem.toml"
START_TIMEOUT_S = 300.0  # the first run fetches server-filesystem through npx


def proxy_bin() -> Path:
    explicit = os.environ.get("PROXY_BIN")
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not target.is_absolute():
        target = ROOT / target
    return target / "release" / "elicitation-proxy"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def shipped_config(data: Path, port: int) -> str:
    """examples/proxy/filesystem.toml serving `data` on `port`; nothing else changed."""
    text = CONFIG.read_text()
    for old in ('"examples/proxy/data"', '"127.0.0.1:3000"'):
        if old not in text:
            pytest.fail(f"{CONFIG} no longer holds {old}: update shipped_config")
    return text.replace('"examples/proxy/data"', json.dumps(str(data))).replace(
        '"127.0.0.1:3000"', f'"127.0.0.1:{port}"'
    )


class Proxy:
    """`elicitation-proxy --config FILE`, up once /healthz answers; `url` is its /mcp."""

    def __init__(self, workdir: Path, data: Path) -> None:
        binary = proxy_bin()
        if not binary.exists():
            pytest.fail(f"no proxy at {binary} (cargo build --release -p elicitation-proxy, or set PROXY_BIN)")
        port = free_port()
        config = workdir / "filesystem.toml"
        config.write_text(shipped_config(data, port))
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.log_path = workdir / "proxy.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [str(binary), "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, RUST_LOG=os.environ.get("PROXY_RUST_LOG", "info")),
            cwd=ROOT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(self.url.replace("/mcp", "/healthz"), timeout=5) as r:  # noqa: S310
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        pytest.fail(f"the proxy did not come up; its log:\n{self.log()}")

    def metric(self, line_prefix: str) -> int:
        """The value of the /metrics line starting with `line_prefix` (0 when absent)."""
        with urllib.request.urlopen(self.url.replace("/mcp", "/metrics"), timeout=10) as r:  # noqa: S310
            for line in r.read().decode().splitlines():
                if line.startswith(line_prefix + " "):
                    return int(line.rsplit(" ", 1)[1])
        return 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


def post_json(url: str, body: bytes, headers: dict[str, str]) -> dict:
    """POSTs `body` as is; the JSON-RPC reply (`application/json` or the SSE event with an id)."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        text = error.read().decode()
    text = text.strip()
    if not text.startswith("{"):
        data = [line[len("data:") :].strip() for line in text.splitlines() if line.startswith("data:")]
        return next(e for e in (json.loads(d) for d in data if d.startswith("{")) if "id" in e)
    return json.loads(text)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="interop-proxy."))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def data(workdir: Path) -> Path:
    """A copy of examples/proxy/data (real path: the server resolves links)."""
    path = (workdir / "data").resolve()
    shutil.copytree(ROOT / "examples" / "proxy" / "data", path)
    return path


@pytest.fixture(scope="session")
def proxy(workdir: Path, data: Path) -> Iterator[Proxy]:
    running = Proxy(workdir, data)
    yield running
    running.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    running = item.funcargs.get("proxy") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(running, Proxy):
        report.sections.append(("elicitation-proxy log", running.log()))
