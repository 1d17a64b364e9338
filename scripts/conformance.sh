#!/usr/bin/env bash
# Runs the official MCP conformance suite against tools/src/bin/conformance.rs, an
# "everything" rmcp server (every tool, prompt, resource, template, completion, Tasks and
# x-mcp-header fixture the suite drives), by requirement set, as the suite defines them
# (`server --requirements <revision>`), never a chosen list:
#
# 1. the 2026-07-28 set against the fixture bare (rmcp alone, MCP_STACK=bare);
# 2. the same set against the fixture behind ElicitationLayer (MCP_STACK=layer);
# 3. the comparison, per scenario and in total: fails when the layer loses a check the bare
#    server passes, or when the layered run has any failure or warning (unscored scenarios,
#    the Tasks extension's and the pending ones, included);
# 4. the 2025-11-25 set against the fixture behind LegacyBridgeLayer (MCP_STACK=bridge): its
#    totals and every failing or warning check. Failures or warnings there fail the script
#    too (CONFORMANCE_2025_STRICT=0 reports them without failing).
#
#   scripts/conformance.sh
#   MCP_JSON_RESPONSE=1 scripts/conformance.sh   # application/json replies instead of SSE
#   CONFORMANCE_2025_STRICT=0 scripts/conformance.sh   # the 2025-11-25 set reported, not fatal
#
# Needs the Rust toolchain, python3 and npm. The suite (pinned) and the Node 22 runtime it
# requires (npm package `node@22`) are installed into .cache/conformance/ on first use and
# reused after; the npm registry is the only network access. Results (checks.json per
# scenario, harness and server logs) are left in .cache/conformance/results/<run>/.
set -euo pipefail

CONFORMANCE_PACKAGE="@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE_PACKAGE="node@22"
MODERN=2026-07-28
LEGACY=2025-11-25

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${CONFORMANCE_CACHE:-$root/.cache/conformance}"
results="$cache/results"
node="$cache/node_modules/node/bin/node"
cli="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"
strict_2025="${CONFORMANCE_2025_STRICT:-1}"

log() { printf 'conformance.sh: %s\n' "$*" >&2; }

# ---- install (or reuse) the suite and Node 22 ----
# shellcheck source=lib/conformance-suite.sh
source "$root/scripts/lib/conformance-suite.sh"

# ---- build the fixture server ----
cargo build --manifest-path "$root/Cargo.toml" -p tower-elicitation-tools --bin conformance >&2
target_dir=$(cargo metadata --manifest-path "$root/Cargo.toml" --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
server_bin="$target_dir/debug/conformance"

rm -rf "$results"
mkdir -p "$results"

key="k1:$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())')"

server_pid=
stop_server() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=
}
trap stop_server EXIT

# run_set NAME STACK REVISION: starts the fixture with MCP_STACK=STACK, runs the REVISION
# requirement set against it into $results/NAME, stops it.
run_set() {
    local name=$1 stack=$2 revision=$3
    local out="$results/$name" port url
    mkdir -p "$out"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url="http://127.0.0.1:$port/mcp"
    MCP_ADDR="127.0.0.1:$port" MCP_STACK="$stack" MCP_REQUEST_STATE_KEYS="$key" \
        RUST_LOG="${RUST_LOG:-warn,tower_elicitation=debug}" \
        "$server_bin" >"$out/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 100); do
        if ! kill -0 "$server_pid" 2>/dev/null; then
            log "error: the server ($stack) exited; its log:"
            cat "$out/server.log" >&2
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        log "error: the server ($stack) does not answer on port $port after 10 s"
        exit 1
    fi
    log "$name: the $revision set against the fixture ($stack) at $url"
    # The harness's exit code only says whether a scored check failed; checks.json says which.
    (cd "$out" && "$node" "$cli" server --url "$url" --requirements "$revision" \
        -o "$out/checks" >"$out/harness.log" 2>&1) || true
    stop_server
}

run_set bare-2026 bare "$MODERN"
run_set layer-2026 layer "$MODERN"
run_set bridge-2025 bridge "$LEGACY"

# Which scenarios each set runs without scoring them (extensions, pending, added after release).
"$node" "$cli" list --requirements "$MODERN" >"$results/requirements-$MODERN.txt"
"$node" "$cli" list --requirements "$LEGACY" >"$results/requirements-$LEGACY.txt"

# ---- compare and count ----
python3 - "$results" "$MODERN" "$LEGACY" "$strict_2025" <<'PY'
import json
import pathlib
import re
import sys

results = pathlib.Path(sys.argv[1])
modern, legacy, strict_2025 = sys.argv[2], sys.argv[3], sys.argv[4] == "1"


def unscored(revision):
    """Scenario -> why it is run but not scored, from `list --requirements`."""
    text = (results / f"requirements-{revision}.txt").read_text()
    found, reason, inside = {}, None, False
    for line in text.splitlines():
        if line.startswith("Run and reported, but never scored"):
            inside = True
        elif inside and re.match(r"^  \S.*\(\d+\):$", line):
            reason = line.strip().split(" (")[0]
        elif inside and (m := re.match(r"^    - (\S+) \[server\]$", line)):
            found[m.group(1)] = reason
    return found


def required(revision):
    """Every server scenario the set runs: the scored ones and the ones reported only."""
    text = (results / f"requirements-{revision}.txt").read_text()
    found, inside = set(), False
    for line in text.splitlines():
        if line.startswith("Server scenarios"):
            inside = True
        elif inside and (m := re.match(r"^  - (\S+)$", line)):
            found.add(m.group(1))
        elif inside and not line.strip():
            inside = False
    return found | set(unscored(revision))


def load(run):
    """Scenario -> list of checks, from each scenario's checks.json."""
    scenarios = {}
    for path in sorted((results / run / "checks").glob("*/checks.json")):
        name = re.sub(r"^server-", "", path.parent.name)
        name = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", name)
        scenarios[name] = json.loads(path.read_text())
    return scenarios


def keyed(checks):
    """(id, name, n-th occurrence) -> status: a check id may be emitted more than once."""
    seen, out = {}, {}
    for check in checks:
        base = (check.get("id"), check.get("name"))
        seen[base] = seen.get(base, 0) + 1
        out[base + (seen[base],)] = check
    return out


def tally(checks):
    count = lambda status: sum(1 for c in checks if c.get("status") == status)
    return count("SUCCESS"), count("FAILURE"), count("WARNING")


def problems(checks):
    for check in checks:
        if check.get("status") in ("FAILURE", "WARNING"):
            message = (check.get("errorMessage") or "").replace("\n", " ")
            yield f"     {check['status']} {check.get('id')}: {message[:300]}"


exit_code = 0

# -- 2026-07-28: bare versus layered --
bare, layered = load("bare-2026"), load("layer-2026")
skip = unscored(modern)
print(f"== {modern} requirement set: bare rmcp fixture vs behind ElicitationLayer ==")
print(f"{'scenario':<48} {'bare ok/fail/warn':>18} {'layered ok/fail/warn':>21}")
totals = {"bare": [0, 0, 0], "layer": [0, 0, 0]}
scored_totals = {"bare": [0, 0, 0], "layer": [0, 0, 0]}
lost, layered_bad = [], []
for scenario in sorted(set(bare) | set(layered) | required(modern)):
    b, l = bare.get(scenario, []), layered.get(scenario, [])
    tb, tl = tally(b), tally(l)
    for run, t in (("bare", tb), ("layer", tl)):
        for i in range(3):
            totals[run][i] += t[i]
            if scenario not in skip:
                scored_totals[run][i] += t[i]
    note = f"  ({skip[scenario]}, not scored)" if scenario in skip else ""
    skipped = sum(1 for c in l if c.get("status") == "SKIPPED")
    if skipped:
        note += f"  [{skipped} check(s) skipped by the suite]"
    if scenario not in layered:
        note += "  NOT RUN behind the layer"
    if scenario not in bare:
        note += "  NOT RUN bare"
    print(f"{scenario:<48} {'%d/%d/%d' % tb:>18} {'%d/%d/%d' % tl:>21}{note}")
    kb, kl = keyed(b), keyed(l)
    for key, check in kb.items():
        if check.get("status") == "SUCCESS" and kl.get(key, {}).get("status") != "SUCCESS":
            got = kl.get(key, {}).get("status", "absent")
            lost.append(f"     LOST {scenario}: {key[0]} ({key[1]}): bare SUCCESS, layered {got}")
    if tl[1] or tl[2] or scenario not in layered:
        layered_bad.append(scenario)
        for line in problems(l):
            print(line)
    if tb[1] or tb[2]:
        for line in problems(b):
            print(line.replace("     ", "     bare: ", 1))
for run, label in (("bare", "bare"), ("layer", "behind ElicitationLayer")):
    ok, bad, warn = totals[run]
    sok, sbad, swarn = scored_totals[run]
    print(f"conformance ({modern}, {label}): {ok} passed, {bad} failed, {warn} warnings"
          f" (scored scenarios: {sok} passed, {sbad} failed, {swarn} warnings)")
if lost:
    print(f"the layer loses {len(lost)} check(s) the bare server passes:")
    print("\n".join(lost))
    exit_code = 1
else:
    print("the layer loses no check the bare server passes")
if layered_bad:
    print(f"layered run not clean: {', '.join(layered_bad)}")
    exit_code = 1

# -- 2025-11-25 through the bridge --
bridged = load("bridge-2025")
skip = unscored(legacy)
for scenario in required(legacy) - set(bridged):
    bridged[scenario] = [{"id": scenario, "status": "FAILURE",
                          "errorMessage": "no checks.json: the scenario did not run (see harness.log)"}]
print()
print(f"== {legacy} requirement set: behind LegacyBridgeLayer + ElicitationLayer ==")
total, scored = [0, 0, 0], [0, 0, 0]
for scenario in sorted(bridged):
    checks = bridged[scenario]
    t = tally(checks)
    for i in range(3):
        total[i] += t[i]
        if scenario not in skip:
            scored[i] += t[i]
    verdict = "FAIL" if t[1] else "WARN" if t[2] else "ok  "
    note = f"  ({skip[scenario]}, not scored)" if scenario in skip else ""
    print(f"{verdict} {scenario}: {t[0]} ok, {t[1]} failing, {t[2]} warning{note}")
    for line in problems(checks):
        print(line)
print(f"conformance ({legacy}, through the bridge): {total[0]} passed, {total[1]} failed,"
      f" {total[2]} warnings (scored scenarios: {scored[0]} passed, {scored[1]} failed,"
      f" {scored[2]} warnings)")
if total[1] or total[2]:
    if strict_2025:
        print(f"the {legacy} set is not clean (CONFORMANCE_2025_STRICT=0 reports it without failing)")
        exit_code = 1
    else:
        print(f"(not fatal: CONFORMANCE_2025_STRICT=0)")
sys.exit(exit_code)
PY
