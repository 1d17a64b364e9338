#!/usr/bin/env bash
# Real clients over Streamable HTTP in front of `elicitation-proxy` serving the shipped
# examples/proxy/filesystem.toml (its directory and port changed) in front of server-filesystem:
#
#   - the Python `mcp==2.3.0` client, speaking 2026-07-28 (tests/interop_proxy/test_proxy.py,
#     pytest, in .venv/interop as scripts/interop.sh makes it);
#   - the TypeScript SDK 1.x client (`@modelcontextprotocol/sdk`, the version
#     scripts/upstream-servers.sh pins), speaking 2025-11-25 through the proxy's bridge, with an
#     elicitation handler (tests/interop_proxy/ts_client.mjs, Node).
#
# Each: a read not asked; a gated write asked, declined (refused, not written) and approved
# (written); the client's approval sent again refused (2026: JSON-RPC -32602 and the replay
# counter; 2025: dropped, the next write asked afresh).
#
#   scripts/interop-proxy.sh [extra pytest args...]
#
# Builds the proxy (`cargo build --release -p elicitation-proxy`) unless PROXY_BIN names one.
# Prints `interop-proxy (python mcp 2.3.0): …`, `interop-proxy (ts-sdk): …` and last
# `interop-proxy: N passed, N failed`; exits non-zero when a check failed or none passed.
# Environment: PROXY_BIN, INTEROP_PYTHON, CARGO_TARGET_DIR (honoured).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv/interop
REQUIREMENTS=$ROOT/tests/interop/requirements.txt
TESTS=$ROOT/tests/interop_proxy
SDK=$ROOT/.cache/upstream/node_modules/@modelcontextprotocol/sdk
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case $TARGET_DIR in /*) ;; *) TARGET_DIR=$ROOT/$TARGET_DIR ;; esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/interop-proxy.XXXXXX")
PASSED=0
FAILED=0
proxy_pid=

log() { printf 'interop-proxy.sh: %s\n' "$*" >&2; }

# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
    local rc=$?
    set +e
    if [[ -n $proxy_pid ]] && kill -0 "$proxy_pid" 2>/dev/null; then
        kill "$proxy_pid"
        wait "$proxy_pid"
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=lib/venvs.sh
source "$ROOT/scripts/lib/venvs.sh"
ensure_venv "$VENV" "$REQUIREMENTS" "mcp, pytest, anyio, httpx2"

log "installing the upstream servers (and the TypeScript SDK they pin)"
bash "$ROOT/scripts/upstream-servers.sh"
command -v node >/dev/null 2>&1 || { log "node is needed for server-filesystem and the TypeScript client"; exit 1; }
[[ -f $SDK/package.json ]] || { log "no TypeScript SDK at $SDK"; exit 1; }

if [[ -n ${PROXY_BIN:-} ]]; then
    log "using PROXY_BIN=$PROXY_BIN (not building it)"
else
    log "building elicitation-proxy (release)"
    cargo build --quiet --release -p elicitation-proxy >&2
    PROXY_BIN=$TARGET_DIR/release/elicitation-proxy
fi
[[ -x $PROXY_BIN ]] || { log "no proxy binary at $PROXY_BIN"; exit 1; }
export PROXY_BIN

# --- the Python client (pytest) ------------------------------------------------------
junit=$WORK/junit.xml
set +e
PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -m pytest "$TESTS" -p no:cacheprovider -rfE \
    --junitxml="$junit" "$@"
rc=$?
set -e
passed=0
failed=0
if [[ -f $junit ]]; then
    read -r passed failed < <("$VENV/bin/python" - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
total = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) + int(s.get("skipped", 0)) for s in suites)
print(total - bad, bad)
PY
)
fi
[[ $rc -ne 0 && $failed -eq 0 ]] && failed=1
echo "interop-proxy (python mcp 2.3.0): $passed passed, $failed failed"
PASSED=$((PASSED + passed))
FAILED=$((FAILED + failed))

# --- the TypeScript client -----------------------------------------------------------
port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$WORK/ts"
cp -r "$ROOT/examples/proxy/data" "$WORK/ts/data"
data=$(cd "$WORK/ts/data" && pwd -P)
sed -e "s|\"examples/proxy/data\"|\"$data\"|" -e "s|\"127.0.0.1:3000\"|\"127.0.0.1:$port\"|" \
    "$ROOT/examples/proxy/filesystem.toml" >"$WORK/ts/filesystem.toml"
grep -q "127.0.0.1:$port" "$WORK/ts/filesystem.toml" || { log "the shipped config no longer names 127.0.0.1:3000"; exit 1; }
"$PROXY_BIN" --config "$WORK/ts/filesystem.toml" >"$WORK/ts/proxy.log" 2>&1 &
proxy_pid=$!
up=
# The first run fetches server-filesystem through npx: up to 300 s.
for _ in $(seq 1 1500); do
    if "$VENV/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
        up=1
        break
    fi
    kill -0 "$proxy_pid" 2>/dev/null || break
    sleep 0.2
done
passed=0
failed=0
if [[ -z $up ]]; then
    log "the proxy did not come up; its log:"
    tail -n 40 "$WORK/ts/proxy.log" >&2
    failed=1
else
    set +e
    PROXY_URL="http://127.0.0.1:$port/mcp" DATA="$data" SDK="$SDK" node "$TESTS/ts_client.mjs" | tee "$WORK/ts/out.txt"
    rc=${PIPESTATUS[0]}
    set -e
    passed=$(grep -c '^ok ' "$WORK/ts/out.txt" || true)
    failed=$(grep -c '^FAIL ' "$WORK/ts/out.txt" || true)
    [[ $rc -ne 0 && $failed -eq 0 ]] && failed=1
    [[ $failed -eq 0 ]] || { log "the proxy's log:"; tail -n 40 "$WORK/ts/proxy.log" >&2; }
fi
echo "interop-proxy (ts-sdk $(node -p "require('$SDK/package.json').version")): $passed passed, $failed failed"
PASSED=$((PASSED + passed))
FAILED=$((FAILED + failed))

echo "interop-proxy: $PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 && $PASSED -gt 0 ]]
