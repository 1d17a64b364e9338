#!/usr/bin/env bash
# Interop tests through the whole stack in front of real MCP servers: `front`
# (tools/src/bin/front.rs: the upstream adapter, `ElicitationLayer` and the legacy bridge) started
# by the tests in front of server-filesystem (stdio, `--gate write_file`), server-everything (stdio
# and its Streamable HTTP mode), the FastMCP fixture tests/upstream/elicit_server.py, the rmcp
# 2025-era stdio server `upstream-rmcp` and the deploy example's bare rmcp 2026-07-28 service over
# HTTP (`deploy-bare`, behind `front --url`), driven by
# the Python `mcp==2.3.0` client speaking 2026-07-28 (tests/interop_upstream) and the Python
# `mcp==1.30.0` ClientSession speaking 2025-11-25 through the bridge
# (tests/interop_upstream/legacy), each in the virtualenv scripts/interop.sh uses.
#
#   scripts/interop-upstream.sh [extra pytest args...]
#
# 1. creates (or reuses) .venv/interop and .venv/interop-legacy, as scripts/interop.sh does;
# 2. installs the servers (scripts/upstream-servers.sh, into .cache/upstream; it builds
#    `upstream-rmcp` too);
# 3. builds `cargo build -p tower-elicitation-tools --bin front --bin deploy-bare`, leaving out
#    each one FRONT_BIN or DEPLOY_BARE_BIN names (a binary already built);
# 4. runs pytest on both sets (each test module starts the `front`s it needs on free loopback
#    ports and stops them), with a fresh random MCP_REQUEST_STATE_KEYS;
# 5. prints `interop-upstream (2026-07-28): …`, `interop-upstream (2025-11-25): …`, and last
#    `interop-upstream: N passed, N failed` for both.
#
# Exits non-zero when any test failed (an xfail(strict=True) that passes is a failure), when no
# test passed, or when a step before the tests failed. Expected failures (xfail) are counted
# apart, neither passed nor failed.
#
# Environment: FRONT_BIN (use this `front`, do not build it), DEPLOY_BARE_BIN (the same for
# `deploy-bare`), MCP_UPSTREAM_RMCP (the `upstream-rmcp` the tests front; default the one
# upstream-servers.sh builds), INTEROP_PYTHON (interpreter for the
# venvs; default python3.11, else python3), CARGO_TARGET_DIR (honoured), FRONT_RUST_LOG (front's
# log filter, default info; a failed test's report carries the last lines).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv/interop
REQUIREMENTS=$ROOT/tests/interop/requirements.txt
LEGACY_VENV=$ROOT/.venv/interop-legacy
LEGACY_REQUIREMENTS=$ROOT/tests/interop/legacy/requirements.txt
TESTS=$ROOT/tests/interop_upstream
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case $TARGET_DIR in /*) ;; *) TARGET_DIR=$ROOT/$TARGET_DIR ;; esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/interop-upstream.XXXXXX")
PASSED=0
FAILED=0
XFAILED=0
SUMMARY_PRINTED=

log() { printf 'interop-upstream.sh: %s\n' "$*" >&2; }

summary() {
    if [[ -z $SUMMARY_PRINTED ]]; then
        SUMMARY_PRINTED=1
        echo "interop-upstream: $PASSED passed, $FAILED failed"
    fi
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
    local rc=$?
    set +e
    if [[ $rc -ne 0 && -z $SUMMARY_PRINTED ]]; then
        log "failed before the tests finished (exit $rc)"
        # Nothing ran to completion: at least one failure.
        [[ $FAILED -eq 0 ]] && FAILED=1
    fi
    summary
    rm -rf "$WORK"
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- Python virtualenvs (as scripts/interop.sh makes them) ---------------------------

# shellcheck source=lib/venvs.sh
source "$ROOT/scripts/lib/venvs.sh"

ensure_venv "$VENV" "$REQUIREMENTS" "mcp, pytest, anyio, httpx2"
ensure_venv "$LEGACY_VENV" "$LEGACY_REQUIREMENTS" "mcp, pytest, anyio"
VPY=$VENV/bin/python
LEGACY_VPY=$LEGACY_VENV/bin/python

# --- the servers, and front ----------------------------------------------------------

log "installing the upstream servers"
bash "$ROOT/scripts/upstream-servers.sh"
command -v node >/dev/null 2>&1 || { log "node is needed for server-filesystem and server-everything"; exit 1; }

# upstream-rmcp is built by upstream-servers.sh (into $TARGET_DIR/debug) unless named.
MCP_UPSTREAM_RMCP=${MCP_UPSTREAM_RMCP:-$TARGET_DIR/debug/upstream-rmcp}
BUILD=()
if [[ -n ${FRONT_BIN:-} ]]; then
    log "using FRONT_BIN=$FRONT_BIN (not building it)"
else
    BUILD+=(--bin front)
    FRONT_BIN=$TARGET_DIR/debug/front
fi
if [[ -n ${DEPLOY_BARE_BIN:-} ]]; then
    log "using DEPLOY_BARE_BIN=$DEPLOY_BARE_BIN (not building it)"
else
    BUILD+=(--bin deploy-bare)
    DEPLOY_BARE_BIN=$TARGET_DIR/debug/deploy-bare
fi
if [[ ${#BUILD[@]} -gt 0 ]]; then
    log "building ${BUILD[*]}"
    cargo build -p tower-elicitation-tools "${BUILD[@]}" >&2
fi
[[ -x $FRONT_BIN ]] || { log "no front binary at $FRONT_BIN"; exit 1; }
[[ -x $DEPLOY_BARE_BIN ]] || { log "no deploy-bare binary at $DEPLOY_BARE_BIN"; exit 1; }
[[ -x $MCP_UPSTREAM_RMCP ]] || { log "no upstream-rmcp binary at $MCP_UPSTREAM_RMCP"; exit 1; }
export FRONT_BIN DEPLOY_BARE_BIN MCP_UPSTREAM_RMCP

# A fresh signing key for this run (front would make a random one per process and warn).
MCP_REQUEST_STATE_KEYS="kid:$("$VPY" -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())')"
export MCP_REQUEST_STATE_KEYS

# --- run the tests -------------------------------------------------------------------

# run_pytest PYTHON DIR NAME [args...]: adds to PASSED, FAILED and XFAILED; prints a line.
run_pytest() {
    local python=$1 dir=$2 name=$3 junit=$WORK/junit-$3.xml rc passed=0 failed=0 skipped=0
    shift 3
    set +e
    PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest "$dir" -p no:cacheprovider -rfEx \
        --junitxml="$junit" "$@"
    rc=$?
    set -e
    if [[ -f $junit ]]; then
        # pytest's JUnit report counts an xfail as skipped, and a strict XPASS as a failure.
        read -r passed failed skipped < <("$python" - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
total = failed = skipped = 0
for suite in suites:
    total += int(suite.get("tests", 0))
    failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped += int(suite.get("skipped", 0))
print(total - failed - skipped, failed, skipped)
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
    echo "interop-upstream ($name): $passed passed, $failed failed, $skipped xfailed or skipped"
    PASSED=$((PASSED + passed))
    FAILED=$((FAILED + failed))
    XFAILED=$((XFAILED + skipped))
}

run_pytest "$VPY" "$TESTS" 2026-07-28 --ignore="$TESTS/legacy" "$@"
run_pytest "$LEGACY_VPY" "$TESTS/legacy" 2025-11-25 "$@"

[[ $XFAILED -eq 0 ]] || log "$XFAILED expected failures (xfail: known bugs, see the tests' reasons)"
[[ $PASSED -ne 0 ]] || log "no test passed"
summary
if [[ $FAILED -ne 0 || $PASSED -eq 0 ]]; then
    exit 1
fi
exit 0
