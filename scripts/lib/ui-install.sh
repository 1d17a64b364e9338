# Sourced by scripts/ui-check.sh and scripts/ui-check-proxy.sh: installs (or reuses) what the MCP
# Inspector's web UI needs in headless Chromium, pinned: Debian's `chromium` (apt-get, as root),
# and under $cache (default .cache/ui-check) the Inspector, `playwright-core` (launched with
# Debian's Chromium; Playwright's own browser downloads are never used) and the Node 22 runtime
# the Inspector needs (npm package `node@22`). Expects `root` (the repository) and `log`; sets
# CHROMIUM, cache, modules, node and launcher, and defines `free_port`,
# `wait_for_line FILE PID PATTERN SECONDS`, and `started PID` / `stop` / `stop_at_exit DIR` (the
# processes of one run, ended together; DIR removed at exit).

INSPECTOR_PACKAGE="@modelcontextprotocol/inspector@2.12.0"
PLAYWRIGHT_PACKAGE="playwright-core@1.65.1"
NODE_PACKAGE="node@22"
CHROMIUM=/usr/bin/chromium

cache="${UI_CHECK_CACHE:-$root/.cache/ui-check}"
modules="$cache/node_modules"
node="$modules/node/bin/node"
launcher="$modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"

# ---- install (or reuse) Chromium, the Inspector, playwright-core and Node 22 ----
if [[ ! -x $CHROMIUM ]]; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        log "error: $CHROMIUM is missing (on Debian, as root: apt-get install chromium)"
        exit 1
    fi
    log "installing Debian's chromium"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi

version_of() {
    "$node" -p "require('$modules/$1/package.json').version" 2>/dev/null
}
node_major() {
    "$node" -p 'process.versions.node.split(".")[0]' 2>/dev/null
}
if [[ "$(node_major)" != 22 ||
    "$(version_of @modelcontextprotocol/inspector)" != "${INSPECTOR_PACKAGE##*@}" ||
    "$(version_of playwright-core)" != "${PLAYWRIGHT_PACKAGE##*@}" ]]; then
    log "installing $INSPECTOR_PACKAGE, $PLAYWRIGHT_PACKAGE and $NODE_PACKAGE into $cache"
    mkdir -p "$cache"
    # node@22 ships its binary through an install script: allow exactly that one.
    if [[ ! -f "$cache/package.json" ]]; then
        printf '{ "private": true, "allowScripts": { "node": true } }\n' >"$cache/package.json"
    fi
    npm install --prefix "$cache" --no-audit --no-fund --loglevel=error \
        "$INSPECTOR_PACKAGE" "$PLAYWRIGHT_PACKAGE" "$NODE_PACKAGE" >&2
    if [[ "$(node_major)" != 22 ]]; then
        log "error: $node is not a Node 22 binary (did npm skip the install script of $NODE_PACKAGE?)"
        exit 1
    fi
    [[ -f $launcher ]] || { log "error: $launcher is missing after the install"; exit 1; }
fi
log "using Node $("$node" --version), Inspector $(version_of @modelcontextprotocol/inspector), playwright-core $(version_of playwright-core), $("$CHROMIUM" --version 2>/dev/null)"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until `$2` (a PID) has printed `$3` into `$1`, at most `$4` seconds.
wait_for_line() {
    local file=$1 pid=$2 pattern=$3 seconds=$4
    for _ in $(seq 1 $((seconds * 10))); do
        grep -q "$pattern" "$file" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    log "error: no \"$pattern\" from $file; its last lines:"
    tail -n 30 "$file" >&2
    return 1
}

# The processes of one run (the server under test, then the Inspector): `started PID` records
# one, `stop` ends them all, the last started first.
ui_pids=()
started() {
    ui_pids+=("$1")
}
stop() {
    local i pid
    for ((i = ${#ui_pids[@]} - 1; i >= 0; i--)); do
        pid=${ui_pids[i]}
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    ui_pids=()
}

# At exit (and on INT or TERM): `stop`, then remove `$1`, the run's temporary directory.
stop_at_exit() {
    ui_work=$1
    trap 'ui_rc=$?; stop; rm -rf "$ui_work"; exit "$ui_rc"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
