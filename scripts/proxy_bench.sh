#!/usr/bin/env bash
# What `elicitation-proxy` adds in front of the pinned server-filesystem, beside `mcp-proxy`
# 0.6.0 (crates.io, Tower-based) in front of the same server and the server reached directly, in
# one run, interleaved (scripts/proxy_bench.py says how): per call p50, p99, the front's and the
# server's CPU from /proc, and calls/s from concurrent connections; on a read no gate asks about,
# and on a gated write (a flow: the call answered `input_required`, the approved retry).
#
#   scripts/proxy_bench.sh                         # about 5 minutes after the builds
#   scripts/proxy_bench.sh --rounds 10 --batch 20  # shorter (any proxy_bench.py option)
#   scripts/proxy_bench.sh --short                 # seconds: what .ci/run runs (a check that the
#                                                  # bench works, not figures to quote)
#   scripts/proxy_bench.sh --server-questions relay  # the proxy with the server's questions relayed
#
# Then scripts/slow_calls.py: 8 callers at once through the proxy, each calling a 1 s tool.
#
# Builds the proxy (release), installs mcp-proxy 0.6.0 with `cargo install --locked` once per
# machine (into $MCP_PROXY_ROOT, else ~/.cache/tower-elicitation/mcp-proxy-0.6.0: it is the
# comparison's binary, not this project's, so a clean checkout such as CI's does not build it
# again), and the server with scripts/upstream-servers.sh.
# Prints the machine, the commit, the date and the tables. .ci/run runs it `--short`: a report,
# not a gate (it fails only when the bench itself breaks).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PWD/$target ;; esac

cargo build --quiet --release -p elicitation-proxy
mcp_root=${MCP_PROXY_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/tower-elicitation/mcp-proxy-0.6.0}
# (it has no --version: cargo install's own record says what is installed)
if [[ ! -x $mcp_root/bin/mcp-proxy ]] || ! grep -qF '"mcp-proxy 0.6.0 ' "$mcp_root/.crates.toml" 2>/dev/null; then
    cargo install --quiet --locked mcp-proxy@0.6.0 --root "$mcp_root"
fi
bash scripts/upstream-servers.sh >/dev/null 2>&1 || bash scripts/upstream-servers.sh

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (with uncommitted changes)" || true)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "proxy bench: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit$dirty"
echo "machine: $(nproc) CPUs ($cpu), $(rustc --version), node $(node --version), load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/proxy_bench.py --proxy "$target/release/elicitation-proxy" \
    --mcp-proxy "$mcp_root/bin/mcp-proxy" \
    --filesystem .cache/upstream/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js "$@"
echo
# Issue #38: 8 callers at once, each calling a tool that takes 1 s (about 12 s; the same in --short).
python3 scripts/slow_calls.py --proxy "$target/release/elicitation-proxy"
