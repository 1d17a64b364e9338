#!/usr/bin/env bash
# Runs the official MCP conformance suite against tools/src/bin/conformance.rs
# (an rmcp server behind ElicitationLayer, behind LegacyBridgeLayer): every
# `input-required-result-*` scenario (MCP 2026-07-28 multi round-trip requests)
# and `server-stateless`, then the thirteen 2025-era server scenarios (sessions,
# `initialize`, elicitation and sampling asked on the call's stream), which the
# legacy bridge serves.
#
#   scripts/conformance.sh
#   MCP_JSON_RESPONSE=1 scripts/conformance.sh   # application/json replies instead of SSE
#
# Needs the Rust toolchain, python3 and npm. The suite (pinned) and the Node 22
# runtime it requires (npm package `node@22`) are installed into
# .cache/conformance/ on first use and reused after; the npm registry is the
# only network access. Results (checks.json per scenario, harness and server
# logs) are left in .cache/conformance/results/.
#
# Prints one line per scenario, a summary line per set, then
# `conformance: N passed, N failed, N warnings`, and exits non-zero when any
# check failed, or when a 2025-era scenario warned (the 2026 set's warnings are
# reported, not fatal).
set -euo pipefail

CONFORMANCE_PACKAGE="@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE_PACKAGE="node@22"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${CONFORMANCE_CACHE:-$root/.cache/conformance}"
results="$cache/results"
node="$cache/node_modules/node/bin/node"
cli="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"

log() { printf 'conformance.sh: %s\n' "$*" >&2; }

# ---- install (or reuse) the suite and Node 22 ----
# shellcheck source=lib/conformance-suite.sh
source "$root/scripts/lib/conformance-suite.sh"

# ---- build and start the fixture server ----
cargo build --manifest-path "$root/Cargo.toml" -p tower-elicitation-tools --bin conformance >&2
target_dir=$(cargo metadata --manifest-path "$root/Cargo.toml" --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
server_bin="$target_dir/debug/conformance"

rm -rf "$results"
mkdir -p "$results"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/mcp"
key="k1:$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())')"

server_pid=
stop_server() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
}
trap stop_server EXIT

MCP_ADDR="127.0.0.1:$port" MCP_REQUEST_STATE_KEYS="$key" RUST_LOG="${RUST_LOG:-warn,tower_elicitation=debug}" \
    "$server_bin" >"$results/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 1 100); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        log "error: the server exited; its log:"
        cat "$results/server.log" >&2
        exit 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        break
    fi
    sleep 0.1
done
if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    log "error: the server does not answer on port $port after 10 s"
    exit 1
fi
log "server listening on $url (log: $results/server.log)"

# ---- run the scenarios ----
mapfile -t scenarios < <(
    "$node" "$cli" list --server |
        sed -n 's/^ *- \([a-z0-9-]*\) .*/\1/p' |
        grep -E '^(input-required-result-.*|server-stateless)$'
)
if [[ ${#scenarios[@]} -ne 15 ]]; then
    log "error: expected 14 input-required-result-* scenarios and server-stateless, found ${#scenarios[@]}: ${scenarios[*]}"
    exit 1
fi

# The 2025-era server scenarios: with `--scenario` and no `--spec-version`, each
# runs at 2025-11-25 over the stateful wire, through the legacy bridge.
legacy=(
    server-initialize server-session-lifecycle ping logging-set-level tools-list
    tools-call-simple-text tools-call-with-progress tools-call-with-logging
    tools-call-elicitation tools-call-sampling elicitation-sep1034-defaults
    elicitation-sep1330-enums dns-rebinding-protection
)

for scenario in "${scenarios[@]}" "${legacy[@]}"; do
    # The harness's exit code only says whether a check failed; checks.json says which.
    (cd "$results" && "$node" "$cli" server --url "$url" --scenario "$scenario" \
        -o "$results/$scenario" >"$results/$scenario.log" 2>&1) || true
done

stop_server

# ---- count ----
python3 - "$results" "${#scenarios[@]}" "${scenarios[@]}" "${legacy[@]}" <<'PY'
import json
import pathlib
import sys

results = pathlib.Path(sys.argv[1])
modern_count = int(sys.argv[2])
names = sys.argv[3:]
passed = failed = warnings = 0
set_totals = {}
for index, scenario in enumerate(names):
    era = "2026-07-28" if index < modern_count else "2025-era, bridge"
    before = (passed, failed, warnings)
    found = sorted((results / scenario).glob("**/checks.json"))
    if not found:
        failed += 1
        print(f"FAIL {scenario}: no checks.json (see {results / scenario}.log)")
        set_totals.setdefault(era, [0, 0, 0])[1] += 1
        continue
    checks = json.loads(found[-1].read_text())
    count = lambda status: sum(1 for c in checks if c.get("status") == status)
    ok, bad, warn = count("SUCCESS"), count("FAILURE"), count("WARNING")
    passed, failed, warnings = passed + ok, failed + bad, warnings + warn
    verdict = "FAIL" if bad else "WARN" if warn else "ok  "
    others = len(checks) - ok - bad - warn
    extra = f", {others} skipped/info" if others else ""
    print(f"{verdict} {scenario}: {ok} ok, {bad} failing, {warn} warning{extra}")
    for check in checks:
        if check.get("status") in ("FAILURE", "WARNING"):
            message = check.get("errorMessage") or ""
            print(f"     {check['status']} {check.get('id')}: {message}")
    totals = set_totals.setdefault(era, [0, 0, 0])
    for i, (now, then) in enumerate(zip((passed, failed, warnings), before)):
        totals[i] += now - then
for era, (ok, bad, warn) in set_totals.items():
    print(f"conformance ({era}): {ok} passed, {bad} failed, {warn} warnings")
print(f"conformance: {passed} passed, {failed} failed, {warnings} warnings")
legacy_warnings = set_totals.get("2025-era, bridge", [0, 0, 0])[2]
sys.exit(1 if failed or legacy_warnings else 0)
PY
