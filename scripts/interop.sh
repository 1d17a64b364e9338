#!/usr/bin/env bash
# Interop tests against the `deploy` example (legacy bridge on): the Python `mcp==2.3.0`
# client speaking 2026-07-28 (tests/interop), then the Python `mcp==1.30.0` client speaking
# 2025-11-25 through the bridge (tests/interop/legacy), then the Python `mcp==1.10.0` client
# speaking 2025-06-18 through it (tests/interop/v2025_06_18), each in a virtualenv of its own.
#
#   scripts/interop.sh [extra pytest args...]
#
# 1. creates (or reuses) the virtualenvs .venv/interop (tests/interop/requirements.txt),
#    .venv/interop-legacy (tests/interop/legacy/requirements.txt) and .venv/interop-2025-06-18
#    (tests/interop/v2025_06_18/requirements.txt);
# 2. builds `cargo build --example deploy` and starts it on a free loopback port with a
#    fresh random MCP_REQUEST_STATE_KEYS;
# 3. waits until it answers, runs pytest on tests/interop (2026), tests/interop/legacy
#    (2025-11-25) and tests/interop/v2025_06_18 with MCP_INTEROP_URL set;
# 4. stops the server and prints `interop (2026-07-28): …`, `interop (2025-11-25): …`,
#    `interop (2025-06-18): …` and one line `interop: N passed, N failed` for all three.
#
# Exits non-zero when any test failed, when no test ran, or when a step before the tests
# failed. Environment: INTEROP_PYTHON (interpreter for the venv; default python3.11, else
# python3), CARGO_TARGET_DIR (honoured), RUST_LOG (server log filter, default info).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv/interop
REQUIREMENTS=$ROOT/tests/interop/requirements.txt
LEGACY_VENV=$ROOT/.venv/interop-legacy
LEGACY_REQUIREMENTS=$ROOT/tests/interop/legacy/requirements.txt
V0618_VENV=$ROOT/.venv/interop-2025-06-18
V0618_REQUIREMENTS=$ROOT/tests/interop/v2025_06_18/requirements.txt
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

# shellcheck source=lib/venvs.sh
source "$ROOT/scripts/lib/venvs.sh"

ensure_venv "$VENV" "$REQUIREMENTS" "mcp, pytest, anyio, httpx2"
ensure_venv "$LEGACY_VENV" "$LEGACY_REQUIREMENTS" "mcp, pytest, anyio"
ensure_venv "$V0618_VENV" "$V0618_REQUIREMENTS" "mcp, pytest, anyio"
VPY=$VENV/bin/python
LEGACY_VPY=$LEGACY_VENV/bin/python
V0618_VPY=$V0618_VENV/bin/python

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

# run_pytest PYTHON DIR NAME [args...]: adds to PASSED and FAILED; prints a line for the set.
run_pytest() {
    local python=$1 dir=$2 name=$3 junit=$WORK/junit-$3.xml rc passed=0 failed=0
    shift 3
    set +e
    MCP_INTEROP_URL=$URL PYTHONDONTWRITEBYTECODE=1 \
        "$python" -m pytest "$dir" -p no:cacheprovider -rfE --junitxml="$junit" "$@"
    rc=$?
    set -e
    if [[ -f $junit ]]; then
        read -r passed failed < <("$python" - "$junit" <<'PY'
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
        log "pytest wrote no report for $name (exit $rc)"
    fi
    if [[ $rc -ne 0 && $rc -ne 5 && $failed -eq 0 ]]; then
        # An error the report does not count as a failed test (usage error, crash, ...).
        failed=1
    fi
    if [[ $passed -eq 0 ]]; then
        log "no $name test passed"
        failed=$((failed + 1))
    fi
    echo "interop ($name): $passed passed, $failed failed"
    PASSED=$((PASSED + passed))
    FAILED=$((FAILED + failed))
}

run_pytest "$VPY" "$ROOT/tests/interop" 2026-07-28 --ignore="$ROOT/tests/interop/legacy" \
    --ignore="$ROOT/tests/interop/v2025_06_18" "$@"
run_pytest "$LEGACY_VPY" "$ROOT/tests/interop/legacy" 2025-11-25 "$@"
run_pytest "$V0618_VPY" "$ROOT/tests/interop/v2025_06_18" 2025-06-18 "$@"

stop_server

summary
if [[ $FAILED -ne 0 || $PASSED -eq 0 ]]; then
    [[ $PASSED -eq 0 ]] && log "no test passed"
    exit 1
fi
exit 0
