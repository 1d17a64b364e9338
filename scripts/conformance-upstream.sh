#!/usr/bin/env bash
# Runs the official MCP conformance suite against a 2025-era server on the TypeScript SDK 1.x
# (tests/upstream/conformance_fixture.mjs, which asks its questions as server-to-client
# requests), bare and behind the stack (tools/src/bin/front.rs: the upstream adapter,
# ElicitationLayer and, unless --no-bridge, LegacyBridgeLayer):
#
#   bare      the fixture over its own Streamable HTTP, the 2025-11-25 requirement set;
#   bridged   `front -- node conformance_fixture.mjs` (a stdio child), the same set: every
#             check the bare run passed must pass here too (compared per scenario);
#   mrtr      `front --no-bridge -- node conformance_fixture.mjs`, the fourteen
#             `input-required-result-*` scenarios (2026-07-28): the adapter turns the fixture's
#             requests into `input_required` rounds.
#
#   scripts/conformance-upstream.sh
#   FRONT_BIN=/path/to/front scripts/conformance-upstream.sh   # no cargo build
#
# Needs node, npm and python3; the Rust toolchain unless FRONT_BIN names a built `front`. The
# suite (pinned) and Node 22 are installed into .cache/conformance/ as scripts/conformance.sh
# does; the TypeScript SDK the fixture runs on comes from .cache/upstream/node_modules
# (scripts/upstream-servers.sh, run here when it is missing). Results (checks.json per scenario,
# the harness's, the fixture's and front's logs) are left in .cache/conformance/upstream-results/.
#
# Prints one line per scenario (and each check that is not a success), a total per run, the
# checks the bridged run lost, then `conformance-upstream: N passed, N failed` (checks, all
# three runs), and exits non-zero when a check failed or the bridged run lost one the bare run
# passed. Warnings are printed, not fatal.
#
# Results (suite 0.2.0-alpha.12): bare 78 passed, 2 warnings (the unscored
# `server-sse-polling`: no priming event, no `retry`; the same through the stack); bridged 77
# passed, the same warnings, and one check SUCCESS bare but INFO bridged (shown as DIFF, not
# fatal): `server-sse-streams-functional`, where the stack answers `tools/list` as JSON and the
# suite says SSE streaming is optional; mrtr (2026) 37 passed, 0 failed, 0 warnings. The
# fixture names the key of the scenarios' `user_name` question in its request's `_meta`
# (`tower-elicitation/inputKey`); without it the adapter names it `elicitation-1`.
set -euo pipefail

CONFORMANCE_PACKAGE="@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE_PACKAGE="node@22"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${CONFORMANCE_CACHE:-$root/.cache/conformance}"
results="$cache/upstream-results"
node="$cache/node_modules/node/bin/node"
cli="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"
fixture="$root/tests/upstream/conformance_fixture.mjs"

log() { printf 'conformance-upstream.sh: %s\n' "$*" >&2; }

# ---- install (or reuse) the suite and Node 22 ----
# shellcheck source=lib/conformance-suite.sh
source "$root/scripts/lib/conformance-suite.sh"

# ---- the fixture's SDK ----
if [[ -z "${UPSTREAM_NODE_MODULES:-}" && ! -f "$root/.cache/upstream/node_modules/@modelcontextprotocol/sdk/package.json" ]]; then
    bash "$root/scripts/upstream-servers.sh"
fi

# ---- front ----
if [[ -n "${FRONT_BIN:-}" ]]; then
    front_bin=$FRONT_BIN
else
    cargo build --manifest-path "$root/Cargo.toml" -p tower-elicitation-tools --bin front >&2
    target_dir=$(cargo metadata --manifest-path "$root/Cargo.toml" --format-version 1 --no-deps |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
    front_bin="$target_dir/debug/front"
fi
if [[ ! -x "$front_bin" ]]; then
    log "error: $front_bin is not an executable"
    exit 1
fi

rm -rf "$results"
mkdir -p "$results"
MCP_REQUEST_STATE_KEYS="k1:$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())')"
export MCP_REQUEST_STATE_KEYS

pids=()
stop() {
    local pid=$1
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
}
cleanup() {
    for pid in "${pids[@]}"; do stop "$pid"; done
}
trap cleanup EXIT

# Waits until `$1` (a pid) answers on port `$2`, or fails with its log `$3`.
wait_port() {
    local pid=$1 port=$2 logfile=$3
    for _ in $(seq 1 100); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "error: the server exited; its log:"
            cat "$logfile" >&2
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "error: nothing answers on port $port after 10 s (log: $logfile)"
    exit 1
}

# Starts front with `$@`, the fixture as its stdio child; sets `url` and `front_pid`.
start_front() {
    local name=$1
    shift
    local out="$results/$name.front.out" err="$results/$name.front.log"
    RUST_LOG="${RUST_LOG:-warn,tower_elicitation=debug}" \
        "$front_bin" "$@" -- "$node" "$fixture" >"$out" 2>"$err" &
    front_pid=$!
    pids+=("$front_pid")
    url=
    for _ in $(seq 1 200); do
        url=$(sed -n '1s/^listening on //p' "$out")
        [[ -n "$url" ]] && break
        if ! kill -0 "$front_pid" 2>/dev/null; then
            log "error: front exited; its log:"
            cat "$err" >&2
            exit 1
        fi
        sleep 0.1
    done
    if [[ -z "$url" ]]; then
        log "error: front printed no address after 20 s (log: $err)"
        exit 1
    fi
    log "$name: front on $url (log: $err)"
}

# Runs the suite against `$2` into `$results/$1`, with the rest of the arguments.
suite() {
    local name=$1 target=$2
    shift 2
    # The harness's exit code only says whether a check failed; checks.json says which.
    (cd "$results" && "$node" "$cli" server --url "$target" "$@" -o "$results/$name" \
        >>"$results/$name.log" 2>&1) || true
}

# ---- bare: the fixture over its own Streamable HTTP ----
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$node" "$fixture" --http "$port" >"$results/bare.fixture.log" 2>&1 &
fixture_pid=$!
pids+=("$fixture_pid")
wait_port "$fixture_pid" "$port" "$results/bare.fixture.log"
log "bare: fixture on http://127.0.0.1:$port/mcp"
suite bare "http://127.0.0.1:$port/mcp" --requirements 2025-11-25
stop "$fixture_pid"

# ---- bridged: front (adapter, layer, bridge) with the fixture as a stdio child ----
start_front bridged
suite bridged "$url" --requirements 2025-11-25
stop "$front_pid"

# ---- mrtr: front --no-bridge, the input-required-result-* scenarios ----
mapfile -t mrtr < <(
    "$node" "$cli" list --server | sed -n 's/^ *- \(input-required-result-[a-z0-9-]*\) .*/\1/p'
)
if [[ ${#mrtr[@]} -ne 14 ]]; then
    log "error: expected 14 input-required-result-* scenarios, found ${#mrtr[@]}: ${mrtr[*]}"
    exit 1
fi
start_front mrtr --no-bridge
for scenario in "${mrtr[@]}"; do
    suite mrtr "$url" --scenario "$scenario"
done
stop "$front_pid"

# The 2025-11-25 set's scored server scenarios, to see that none went missing.
mapfile -t required < <(
    "$node" "$cli" list --server --requirements 2025-11-25 |
        sed -n '/^Server scenarios/,/^$/s/^ *- \([a-z0-9-]*\)$/\1/p'
)

# ---- count and compare ----
python3 - "$results" "${#required[@]}" "${required[@]}" "${mrtr[@]}" <<'PY'
import json
import pathlib
import re
import sys

results = pathlib.Path(sys.argv[1])
count = int(sys.argv[2])
required, mrtr = sys.argv[3 : 3 + count], sys.argv[3 + count :]


def load(run):
    """scenario -> [check], from `server-<scenario>-<timestamp>/checks.json`."""
    found = {}
    for path in sorted((results / run).glob("*/checks.json")):
        match = re.fullmatch(r"server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z", path.parent.name)
        if match:
            found[match.group(1)] = json.loads(path.read_text())
    return found


passed = failed = 0
runs = {}
for run, expected, title in (
    ("bare", required, "bare fixture, 2025-11-25"),
    ("bridged", required, "adapter + layer + bridge, 2025-11-25"),
    ("mrtr", mrtr, "adapter + layer, input-required-result-*"),
):
    checks = load(run)
    runs[run] = checks
    ok = bad = warn = 0
    for scenario in list(expected) + sorted(set(checks) - set(expected)):
        if scenario not in checks:
            bad += 1
            print(f"FAIL [{run}] {scenario}: no checks.json (see {results / run}.log)")
            continue
        status = [c.get("status") for c in checks[scenario]]
        s_ok, s_bad, s_warn = status.count("SUCCESS"), status.count("FAILURE"), status.count("WARNING")
        ok, bad, warn = ok + s_ok, bad + s_bad, warn + s_warn
        others = len(status) - s_ok - s_bad - s_warn
        verdict = "FAIL" if s_bad else "WARN" if s_warn else "ok  "
        scored = "" if scenario in expected else " (not scored)"
        extra = f", {others} info/skipped" if others else ""
        print(f"{verdict} [{run}] {scenario}{scored}: {s_ok} ok, {s_bad} failing, {s_warn} warning{extra}")
        for check in checks[scenario]:
            if check.get("status") != "SUCCESS":
                details = check.get("details") if isinstance(check.get("details"), dict) else {}
                message = check.get("errorMessage") or details.get("message") or ""
                message = message.replace("\n", " ")[:300]
                print(f"     {check.get('status')} {check.get('id')}: {message}")
    print(f"conformance-upstream ({title}): {ok} passed, {bad} failed, {warn} warnings")
    passed, failed = passed + ok, failed + bad

lost, differ = [], []
for scenario, checks in runs["bare"].items():
    fronted = {}
    for check in runs["bridged"].get(scenario, []):
        fronted.setdefault(check.get("id"), []).append(check.get("status"))
    for check in checks:
        if check.get("status") == "SUCCESS":
            same = fronted.get(check.get("id")) or []
            now = same.pop(0) if same else "missing"
            # INFO is the suite saying the behaviour is optional (a JSON answer where the bare
            # fixture streamed): shown, not fatal. A failure, a warning or a missing check is lost.
            if now == "INFO":
                differ.append(f"{scenario}: {check.get('id')} (bare SUCCESS, bridged INFO)")
            elif now != "SUCCESS":
                lost.append(f"{scenario}: {check.get('id')} (bare SUCCESS, bridged {now})")
for line in differ:
    print(f"DIFF {line}")
for line in lost:
    print(f"LOST {line}")
print(f"conformance-upstream (bridged vs bare): {len(lost)} checks lost")
print(f"conformance-upstream: {passed} passed, {failed} failed")
sys.exit(1 if failed or lost else 0)
PY
