# Sourced by scripts/conformance.sh and scripts/conformance-upstream.sh: installs (or reuses) the
# pinned conformance suite and the Node 22 it needs into $cache. Expects CONFORMANCE_PACKAGE,
# NODE_PACKAGE, cache, node, cli and a `log` function; leaves `installed_version` defined.

installed_version() {
    "$node" -p "require('$cache/node_modules/@modelcontextprotocol/conformance/package.json').version" 2>/dev/null
}
node_major() {
    "$node" -p 'process.versions.node.split(".")[0]' 2>/dev/null
}
if [[ "$(node_major)" != 22 || "$(installed_version)" != "${CONFORMANCE_PACKAGE##*@}" ]]; then
    log "installing $CONFORMANCE_PACKAGE and $NODE_PACKAGE into $cache"
    mkdir -p "$cache"
    # node@22 ships its binary through an install script: allow exactly that one
    # (npm versions that block unreviewed install scripts would skip it).
    if [[ ! -f "$cache/package.json" ]]; then
        printf '{ "private": true, "allowScripts": { "node": true } }\n' >"$cache/package.json"
    fi
    npm install --prefix "$cache" --no-audit --no-fund --loglevel=error \
        "$CONFORMANCE_PACKAGE" "$NODE_PACKAGE" >&2
    if [[ "$(node_major)" != 22 ]]; then
        log "error: $node is not a Node 22 binary (did npm skip the install script of $NODE_PACKAGE?)"
        exit 1
    fi
    if [[ ! -f "$cli" ]]; then
        log "error: $cli is missing after the install"
        exit 1
    fi
fi
log "using Node $("$node" --version), conformance $(installed_version)"
