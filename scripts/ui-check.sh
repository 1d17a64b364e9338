#!/usr/bin/env bash
# What a person sees: the official MCP Inspector's web UI (v2.12.0, in its 2026 and its 2025 mode)
# driven in headless Chromium against the `deploy` example (scripts/ui-check.mjs): a look at
# every tool's form, then four flows:
#
#   0. every example tool renders its arguments as controls (no raw JSON editor);
#   1. deploy: `environment` renders as a select; the approval form has descriptions; approve;
#   2. deploy with a 300-character note (typed through the dialog's "Edit as JSON"): the re-ask
#      shows the problem on the note and names it in the message, and comes back with `approve`
#      pre-filled;
#   3. connect_github accepted before the URL flow is finished: the re-ask says so; then the flow
#      is completed in the browser and the call goes through;
#   4. delete_branch with a typo: asked again with the gate's retry hint on the name's field; the
#      right name deletes.
#
#   scripts/ui-check.sh           # run the check
#   scripts/ui-check.sh --docs    # also copy the screenshots shown in the README into docs/
#
# Installs what it needs on first use: Debian's `chromium` (apt-get, as root), and under
# .cache/ui-check/ the Inspector, `playwright-core` (pinned; launched with Debian's Chromium,
# Playwright's own browser downloads are never used) and the Node 22 runtime the Inspector
# needs (npm package `node@22`). Builds `examples/deploy` (release).
#
# Runs the flows twice, each time on a fresh example and Inspector (free loopback ports, stopped
# after): with the Inspector in its 2026 mode (`--protocol-era modern`, MCP 2026-07-28) and in
# its 2025 mode (`--protocol-era legacy`, MCP 2025-11-25, answered by the example's bridge); the
# same flows, the same assertions. Prints one line per flow and era, a count per era, then
# `ui-check, both eras: N passed, N failed`; exits non-zero when a flow failed or a step before
# the flows did. Screenshots and logs are left in .cache/ui-check/results/modern/ and
# .cache/ui-check/results/legacy/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
docs=
[[ ${1:-} == --docs ]] && docs=1

log() { printf 'ui-check.sh: %s\n' "$*" >&2; }

# shellcheck source=lib/ui-install.sh
source "$root/scripts/lib/ui-install.sh"
results="$cache/results"

# ---- build the deploy example ----
cargo build --quiet --release --manifest-path "$root/Cargo.toml" --example deploy >&2
target_dir=$(cargo metadata --manifest-path "$root/Cargo.toml" --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
server_bin="$target_dir/release/examples/deploy"

rm -rf "$results"
mkdir -p "$results"
work=$(mktemp -d "${TMPDIR:-/tmp}/ui-check.XXXXXX")

stop_at_exit "$work"

# ---- once per protocol era: start the example and the Inspector on it, and drive it ----
# A fresh example each time: its branches and URL flows are in memory, and a flow's handle is
# the same for the same call, so one era's flows would be the next one's. The Inspector's web
# server needs a fixed port; the MCP Apps sandbox and app origin take any free one. A fresh API
# token, home, storage and in-memory secrets: nothing of a person's own Inspector is read or
# written. `modern` speaks MCP 2026-07-28 to the example; `legacy` speaks 2025-11-25, which the
# example's bridge answers.
run_era() {
    local era=$1 out=$results/$1 server_pid inspector_pid port key server_url client_port token era_rc
    mkdir -p "$out" "$work/$era/home" "$work/$era/storage"
    port=$(free_port)
    key="k1:$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())')"
    MCP_ADDR="127.0.0.1:$port" MCP_REQUEST_STATE_KEYS="$key" RUST_LOG="${RUST_LOG:-info,tower_elicitation=debug}" \
        "$server_bin" >"$out/server.log" 2>&1 &
    server_pid=$!
    started "$server_pid"
    wait_for_line "$out/server.log" "$server_pid" "listening on" 60 || return 1
    server_url="http://127.0.0.1:$port/mcp"
    log "deploy example ($era) at $server_url"
    client_port=$(free_port)
    token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
    (
        cd "$work/$era"
        exec env HOME="$work/$era/home" HOST=127.0.0.1 CLIENT_PORT="$client_port" MCP_SANDBOX_PORT=0 \
            MCP_APP_ORIGIN_PORT=0 MCP_AUTO_OPEN_ENABLED=false MCP_INSPECTOR_API_TOKEN="$token" \
            MCP_STORAGE_DIR="$work/$era/storage" MCP_INSPECTOR_SECRET_STORE=memory \
            "$node" "$launcher" --web --transport http --server-url "$server_url" --protocol-era "$era"
    ) >"$out/inspector.log" 2>&1 &
    inspector_pid=$!
    started "$inspector_pid"
    wait_for_line "$out/inspector.log" "$inspector_pid" "is up and running" 120 || return 1
    log "Inspector ($era) at http://127.0.0.1:$client_port"
    set +e
    UI_CHECK_INSPECTOR="http://127.0.0.1:$client_port/?MCP_INSPECTOR_API_TOKEN=$token" \
        UI_CHECK_ERA="$era" UI_CHECK_RESULTS="$out" UI_CHECK_MODULES="$modules" \
        UI_CHECK_CHROMIUM="$CHROMIUM" "$node" "$root/scripts/ui-check.mjs" | tee "$out/flows.txt"
    era_rc=${PIPESTATUS[0]}
    set -e
    stop
    return "$era_rc"
}

rc=0
for era in modern legacy; do
    run_era "$era" || rc=1
done
stop
passed=$(cat "$results"/*/flows.txt 2>/dev/null | grep -c '^ok ' || true)
failed=$(cat "$results"/*/flows.txt 2>/dev/null | grep -c '^FAIL ' || true)
echo "ui-check, both eras: $passed passed, $failed failed"
[[ $failed -eq 0 ]] || rc=1

if [[ $rc -eq 0 && -n $docs ]]; then
    for name in deploy-select deploy-reask github-reask delete-retry; do
        cp "$results/modern/$name.png" "$root/docs/ui-$name.png"
    done
    log "copied the screenshots into $root/docs/"
fi
log "screenshots and logs: $results"
exit "$rc"
