#!/usr/bin/env bash
# Installs the real MCP servers tests/services/upstream.rs fronts with the upstream adapter, pinned,
# under .cache/upstream (ignored by git):
#
#   .cache/upstream/node_modules  @modelcontextprotocol/server-filesystem and server-everything
#                                 (both 2026.8.31, on @modelcontextprotocol/sdk 1.x: 2025-era),
#                                 with the SDK pinned too;
#   .cache/upstream/venv          Python `mcp` 1.30.0 for tests/upstream/elicit_server.py
#                                 (tests/upstream/requirements.txt, fully pinned);
#
# and builds the rmcp 3.11 server tests/services/upstream_rmcp.rs fronts (the `tools` binary
# `upstream-rmcp`), where `cargo test` puts its test binaries: target/debug (or
# $CARGO_TARGET_DIR/debug). Run it again after changing tools/src/bin/upstream-rmcp.rs.
#
# Idempotent: a second run with nothing changed does nothing. Environment: UPSTREAM_PYTHON
# (interpreter for the venv; default python3.11, else python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR=$PWD/.cache/upstream
FILESYSTEM=2026.8.31
EVERYTHING=2026.8.31
SDK=1.32.2
mkdir -p "$DIR"

stamp="$FILESYSTEM $EVERYTHING $SDK"
if [ "$(cat "$DIR/node.stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "upstream-servers.sh: npm: server-filesystem@$FILESYSTEM server-everything@$EVERYTHING sdk@$SDK" >&2
    cat > "$DIR/package.json" <<JSON
{"name": "upstream-servers", "private": true, "dependencies": {
  "@modelcontextprotocol/server-filesystem": "$FILESYSTEM",
  "@modelcontextprotocol/server-everything": "$EVERYTHING",
  "@modelcontextprotocol/sdk": "$SDK"}}
JSON
    (cd "$DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error >/dev/null)
    echo "$stamp" > "$DIR/node.stamp"
fi

PY=${UPSTREAM_PYTHON:-$(command -v python3.11 || command -v python3)}
REQ=$PWD/tests/upstream/requirements.txt
if ! cmp -s "$REQ" "$DIR/venv.stamp" 2>/dev/null; then
    echo "upstream-servers.sh: venv: $(grep -m1 '^mcp==' "$REQ") with $PY" >&2
    rm -rf "$DIR/venv"
    "$PY" -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
    cp "$REQ" "$DIR/venv.stamp"
fi
echo "upstream-servers.sh: cargo build -p tower-elicitation-tools --bin upstream-rmcp" >&2
cargo build --quiet -p tower-elicitation-tools --bin upstream-rmcp

echo "upstream-servers.sh: ready in $DIR" >&2
