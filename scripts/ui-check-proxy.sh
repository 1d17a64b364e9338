#!/usr/bin/env bash
# What a person sees in front of `elicitation-proxy`: the official MCP Inspector's web UI (v2.12.0,
# in its 2026 and its 2025 mode) driven in headless Chromium (scripts/ui-check-proxy.mjs) against
# the proxy serving the shipped config, examples/proxy/filesystem.toml, in front of the pinned
# `@modelcontextprotocol/server-filesystem` it names (through `npx`, as a person runs it). Three
# flows, each checked in the UI and on disk:
#
#   1. read_text_file: the file's text, and no question asked (no dialog; the proxy's /metrics
#      counts no `ask`);
#   2. write_file, declined in the dialog: refused ("The request was not approved. (decision
#      d-…)", the call's decision id), no file;
#   3. write_file, approved in the dialog: written, the file on disk holds what was typed.
#
# Then a second person approves (scripts/ui-check-approvals.mjs), against the proxy serving
# examples/proxy/approvals.toml (`approvers = "url"`, callers and approvers verified by the demo
# issuer's JWTs): the 2026 Inspector signed in as alice with a bearer token (`--header`) asks a
# write and cancels its URL question (the refusal shows the decision id); a JSON-RPC caller's
# write is approved by bob on the approval page in Chromium (signed in with his token) and
# written; another is denied there and refused, naming bob.
#
#   scripts/ui-check-proxy.sh           # run the check
#   scripts/ui-check-proxy.sh --docs    # also copy the screenshots shown in the README into docs/
#
# Installs what it needs as scripts/ui-check.sh does (scripts/lib/ui-install.sh: Debian's
# chromium, and under .cache/ui-check the Inspector, playwright-core and Node 22) and builds the
# proxy (`cargo build --release -p elicitation-proxy`, what `cargo install --path proxy` builds)
# unless PROXY_BIN names a binary.
#
# Each era gets a fresh proxy (free loopback port, its own copy of examples/proxy/data: the
# shipped config with only its directory and port changed) and a fresh Inspector, stopped after.
# Prints one line per flow and era, then `ui-check-proxy, both eras: N passed, N failed`; exits
# non-zero when a flow or a step before the flows failed. Screenshots and logs are left in
# .cache/ui-check/results-proxy/modern/ and .cache/ui-check/results-proxy/legacy/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
docs=
[[ ${1:-} == --docs ]] && docs=1

log() { printf 'ui-check-proxy.sh: %s\n' "$*" >&2; }

# shellcheck source=lib/ui-install.sh
source "$root/scripts/lib/ui-install.sh"
results="$cache/results-proxy"
config="$root/examples/proxy/filesystem.toml"

# ---- build the proxy (unless PROXY_BIN names one) ----
if [[ -n ${PROXY_BIN:-} ]]; then
    log "using PROXY_BIN=$PROXY_BIN (not building it)"
    proxy_bin=$PROXY_BIN
else
    cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p elicitation-proxy >&2
    target_dir=$(cargo metadata --manifest-path "$root/Cargo.toml" --format-version 1 --no-deps |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
    proxy_bin="$target_dir/release/elicitation-proxy"
fi
[[ -x $proxy_bin ]] || { log "error: no proxy binary at $proxy_bin"; exit 1; }

rm -rf "$results"
mkdir -p "$results"
work=$(mktemp -d "${TMPDIR:-/tmp}/ui-check-proxy.XXXXXX")

stop_at_exit "$work"

# ---- once per protocol era: start the proxy and the Inspector on it, and drive it ----
run_era() {
    local era=$1 out=$results/$1 proxy_pid inspector_pid port data proxy_url client_port token era_rc
    mkdir -p "$out" "$work/$era/home" "$work/$era/storage"
    data="$work/$era/data"
    cp -r "$root/examples/proxy/data" "$data"
    port=$(free_port)
    # The shipped file, its directory and port changed (nothing else: a wrong edit fails here).
    grep -q '"examples/proxy/data"' "$config" && grep -q '"127.0.0.1:3000"' "$config" ||
        { log "error: $config no longer names examples/proxy/data and 127.0.0.1:3000"; return 1; }
    sed -e "s|\"examples/proxy/data\"|\"$data\"|" -e "s|\"127.0.0.1:3000\"|\"127.0.0.1:$port\"|" \
        "$config" >"$work/$era/filesystem.toml"
    RUST_LOG="${RUST_LOG:-info}" "$proxy_bin" --config "$work/$era/filesystem.toml" \
        >"$out/proxy.log" 2>&1 &
    proxy_pid=$!
    started "$proxy_pid"
    # The first run fetches server-filesystem through npx.
    wait_for_line "$out/proxy.log" "$proxy_pid" "listening on" 300 || return 1
    proxy_url="http://127.0.0.1:$port/mcp"
    log "elicitation-proxy ($era) at $proxy_url"
    client_port=$(free_port)
    token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
    (
        cd "$work/$era"
        exec env HOME="$work/$era/home" HOST=127.0.0.1 CLIENT_PORT="$client_port" MCP_SANDBOX_PORT=0 \
            MCP_APP_ORIGIN_PORT=0 MCP_AUTO_OPEN_ENABLED=false MCP_INSPECTOR_API_TOKEN="$token" \
            MCP_STORAGE_DIR="$work/$era/storage" MCP_INSPECTOR_SECRET_STORE=memory \
            "$node" "$launcher" --web --transport http --server-url "$proxy_url" --protocol-era "$era"
    ) >"$out/inspector.log" 2>&1 &
    inspector_pid=$!
    started "$inspector_pid"
    wait_for_line "$out/inspector.log" "$inspector_pid" "is up and running" 120 || return 1
    log "Inspector ($era) at http://127.0.0.1:$client_port"
    set +e
    UI_CHECK_INSPECTOR="http://127.0.0.1:$client_port/?MCP_INSPECTOR_API_TOKEN=$token" \
        UI_CHECK_ERA="$era" UI_CHECK_RESULTS="$out" UI_CHECK_MODULES="$modules" \
        UI_CHECK_CHROMIUM="$CHROMIUM" UI_CHECK_PROXY="$proxy_url" UI_CHECK_DATA="$data" \
        "$node" "$root/scripts/ui-check-proxy.mjs" | tee "$out/flows.txt"
    era_rc=${PIPESTATUS[0]}
    set -e
    stop
    return "$era_rc"
}

# ---- a second person approves: examples/proxy/approvals.toml, the approval page in Chromium ----
# The caller is the 2026 Inspector signed in with a bearer token (`--header`), and a JSON-RPC
# client (scripts/ui-check-approvals.mjs); the approver is bob, in the browser.
run_approvals() {
    local out=$results/approvals proxy_pid port data proxy_url client_port token alice rc_approvals
    local shipped="$root/examples/proxy/approvals.toml"
    mkdir -p "$out" "$work/approvals/home" "$work/approvals/storage"
    data="$work/approvals/data"
    cp -r "$root/examples/proxy/data" "$data"
    port=$(free_port)
    grep -q '"examples/proxy/data"' "$shipped" && grep -q '127.0.0.1:3000' "$shipped" ||
        { log "error: $shipped no longer names examples/proxy/data and 127.0.0.1:3000"; return 1; }
    sed -e "s|\"examples/proxy/data\"|\"$data\"|" -e "s|127.0.0.1:3000|127.0.0.1:$port|g" \
        -e "s|\"examples/proxy/demo-issuer/|\"$root/examples/proxy/demo-issuer/|" \
        "$shipped" >"$work/approvals/approvals.toml"
    RUST_LOG="${RUST_LOG:-info}" "$proxy_bin" --config "$work/approvals/approvals.toml" \
        >"$out/proxy.log" 2>&1 &
    proxy_pid=$!
    started "$proxy_pid"
    wait_for_line "$out/proxy.log" "$proxy_pid" "listening on" 300 || return 1
    proxy_url="http://127.0.0.1:$port/mcp"
    log "elicitation-proxy (approvals) at $proxy_url"
    alice=$("$node" "$root/scripts/demo-token.mjs" alice 600 "$proxy_url")
    client_port=$(free_port)
    token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
    (
        cd "$work/approvals"
        exec env HOME="$work/approvals/home" HOST=127.0.0.1 CLIENT_PORT="$client_port" MCP_SANDBOX_PORT=0 \
            MCP_APP_ORIGIN_PORT=0 MCP_AUTO_OPEN_ENABLED=false MCP_INSPECTOR_API_TOKEN="$token" \
            MCP_STORAGE_DIR="$work/approvals/storage" MCP_INSPECTOR_SECRET_STORE=memory \
            "$node" "$launcher" --web --transport http --server-url "$proxy_url" --protocol-era modern \
            --header "Authorization: Bearer $alice"
    ) >"$out/inspector.log" 2>&1 &
    started "$!"
    wait_for_line "$out/inspector.log" "$!" "is up and running" 120 || return 1
    set +e
    UI_CHECK_INSPECTOR="http://127.0.0.1:$client_port/?MCP_INSPECTOR_API_TOKEN=$token" \
        UI_CHECK_RESULTS="$out" UI_CHECK_MODULES="$modules" UI_CHECK_CHROMIUM="$CHROMIUM" \
        UI_CHECK_PROXY="$proxy_url" UI_CHECK_DATA="$data" \
        "$node" "$root/scripts/ui-check-approvals.mjs" | tee "$out/flows.txt"
    rc_approvals=${PIPESTATUS[0]}
    set -e
    stop
    return "$rc_approvals"
}

rc=0
for era in modern legacy; do
    run_era "$era" || rc=1
done
run_approvals || rc=1
stop
passed=$(cat "$results"/*/flows.txt 2>/dev/null | grep -c '^ok ' || true)
failed=$(cat "$results"/*/flows.txt 2>/dev/null | grep -c '^FAIL ' || true)
echo "ui-check-proxy, both eras: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]] || rc=1

if [[ $rc -eq 0 && -n $docs ]]; then
    for name in proxy-write-form proxy-write-declined proxy-write-done; do
        cp "$results/modern/$name.png" "$root/docs/ui-$name.png"
    done
    for name in approval-page approval-inspector approval-inspector-declined; do
        cp "$results/approvals/$name.png" "$root/docs/ui-$name.png"
    done
    log "copied the screenshots into $root/docs/"
fi
log "screenshots and logs: $results"
exit "$rc"
