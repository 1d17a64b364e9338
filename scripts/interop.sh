#!/usr/bin/env bash
# Interop tests: the Python `mcp==2.3.0` client (tests/interop) against the `deploy` example.
#
#   scripts/interop.sh [extra pytest args...]
#
# 1. creates (or reuses) the virtualenv .venv/interop from tests/interop/requirements.txt;
# 2. builds `cargo build --example deploy` and starts it on a free loopback port with a
#    fresh random MCP_REQUEST_STATE_KEYS;
# 3. waits until it answers, runs pytest on tests/interop with MCP_INTEROP_URL set;
# 4. stops the server and prints one line `interop: N passed, N failed`.
#
# Exits non-zero when any test failed, when no test ran, or when a step before the tests
# failed. Environment: INTEROP_PYTHON (interpreter for the venv; default python3.11, else
# python3), CARGO_TARGET_DIR (honoured), RUST_LOG (server log filter, default info).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv/interop
REQUIREMENTS=$ROOT/tests/interop/requirements.txt
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case $TARGET_DIR in /*) ;; *) TARGET_DIR=$ROOT/$TARGET_DIR ;; esac
SERVER_BIN=$TARGET_DIR/debug/examples/deploy

WORK=$(mktemp -d "${TMPDIR:-/tmp}/interop.XXXXXX")
SERVER_PID=
SERVER_LOG=$WORK/server.log
PASSED=0
FAILED=0
SUMMARY_PRINTED=

log() { printf 'interop.sh: %s\n' "$*" >&2; }

summary() {
    if [[ -z $SUMMARY_PRINTED ]]; then
        SUMMARY_PRINTED=1
        echo "interop: $PASSED passed, $FAILED failed"
    fi
}

stop_server() {
    [[ -n $SERVER_PID ]] || return 0
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
    local rc=$?
    set +e
    stop_server
    if [[ $rc -ne 0 && -z $SUMMARY_PRINTED ]]; then
        log "failed before the tests finished (exit $rc)"
        if [[ -s $SERVER_LOG ]]; then
            log "last lines of the deploy server log:"
            tail -n 40 "$SERVER_LOG" >&2
        fi
    fi
    summary
    rm -rf "$WORK"
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- Python 3.11 virtualenv -----------------------------------------------------------

pick_python() {
    local candidate
    for candidate in ${INTEROP_PYTHON:-} python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    log "no Python >= 3.10 found (tried ${INTEROP_PYTHON:-} python3.11 python3); set INTEROP_PYTHON"
    return 1
}

PYTHON=$(pick_python)
PY_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
[[ $PY_VERSION == 3.11.* ]] || log "warning: Python $PY_VERSION, the requirements were pinned with 3.11"

# Reused when it was built from the same requirements by the same interpreter version.
STAMP="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1) python-$PY_VERSION"

venv_is_current() {
    [[ -x $VENV/bin/python && -f $VENV/.interop-stamp ]] &&
        [[ $(cat "$VENV/.interop-stamp") == "$STAMP" ]] &&
        "$VENV/bin/python" -c 'import mcp, pytest, anyio, httpx2' >/dev/null 2>&1
}

make_venv() {
    if "$PYTHON" -m venv "$VENV" >"$WORK/venv.log" 2>&1; then
        return 0
    fi
    # Debian ships `venv`'s ensurepip in a separate package (python3.X-venv).
    if grep -q ensurepip "$WORK/venv.log" && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        local pkg="python${PY_VERSION%.*}-venv"
        log "the venv module lacks ensurepip: installing $pkg with apt-get"
        rm -rf "$VENV"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >&2
        "$PYTHON" -m venv "$VENV"
        return 0
    fi
    cat "$WORK/venv.log" >&2
    log "cannot create $VENV with $PYTHON (on Debian: apt-get install python${PY_VERSION%.*}-venv)"
    return 1
}

if venv_is_current; then
    log "reusing $VENV (Python $PY_VERSION)"
else
    log "creating $VENV with $PYTHON (Python $PY_VERSION)"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    make_venv
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-virtualenv \
        -r "$REQUIREMENTS" >&2
    echo "$STAMP" >"$VENV/.interop-stamp"
fi
VPY=$VENV/bin/python

# --- build and start the deploy example -----------------------------------------------

log "building the deploy example"
cargo build --example deploy >&2
[[ -x $SERVER_BIN ]] || { log "no binary at $SERVER_BIN after the build"; exit 1; }

# A fresh signing key for this run; the same value for every request of the run.
MCP_REQUEST_STATE_KEYS="kid:$("$VPY" -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())')"
export MCP_REQUEST_STATE_KEYS

free_port() {
    "$VPY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# 0: answers tools/list with the `deploy` tool; 1: not (yet).
probe_server() {
    "$VPY" - "$1" <<'PY'
import json, sys, urllib.request
body = json.dumps({
    "jsonrpc": "2.0", "id": 0, "method": "tools/list",
    "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "interop.sh", "version": "0"},
    }},
}).encode()
request = urllib.request.Request(sys.argv[1], data=body, method="POST", headers={
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/list",
})
try:
    with urllib.request.urlopen(request, timeout=2) as response:
        ok = response.status == 200 and b'"deploy"' in response.read()
except Exception:
    ok = False
sys.exit(0 if ok else 1)
PY
}

# The port can be taken between choosing and binding it: then try another one.
URL=
for attempt in 1 2 3; do
    PORT=$(free_port)
    CANDIDATE=http://127.0.0.1:$PORT/mcp
    log "starting the deploy server on 127.0.0.1:$PORT (attempt $attempt)"
    MCP_ADDR=127.0.0.1:$PORT RUST_LOG=${RUST_LOG:-info} "$SERVER_BIN" >"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 150); do # at most ~15 s (+ probe time)
        if probe_server "$CANDIDATE"; then
            URL=$CANDIDATE
            break
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n $URL ]] && break
    log "the deploy server did not come up; its log:"
    tail -n 20 "$SERVER_LOG" >&2
    stop_server
done
[[ -n $URL ]] || { log "giving up: the deploy server never answered"; exit 1; }
log "deploy server ready at $URL"

# --- run the tests -------------------------------------------------------------------

JUNIT=$WORK/junit.xml
set +e
MCP_INTEROP_URL=$URL PYTHONDONTWRITEBYTECODE=1 \
    "$VPY" -m pytest "$ROOT/tests/interop" -p no:cacheprovider -rfE --junitxml="$JUNIT" "$@"
PYTEST_RC=$?
set -e

stop_server

if [[ -f $JUNIT ]]; then
    read -r PASSED FAILED < <("$VPY" - "$JUNIT" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
total = failed = skipped = 0
for suite in suites:
    total += int(suite.get("tests", 0))
    failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped += int(suite.get("skipped", 0))
print(total - failed - skipped, failed)
PY
)
else
    log "pytest wrote no report (exit $PYTEST_RC)"
fi

if [[ $PYTEST_RC -ne 0 && $PYTEST_RC -ne 5 && $FAILED -eq 0 ]]; then
    # An error the report does not count as a failed test (usage error, crash, ...).
    # (Exit 5 is "no tests collected": caught below as "no test passed".)
    FAILED=1
fi
summary
if [[ $FAILED -ne 0 || $PASSED -eq 0 ]]; then
    [[ $PASSED -eq 0 ]] && log "no test passed"
    exit 1
fi
exit 0
