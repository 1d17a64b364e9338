#!/usr/bin/env bash
# The upstream adapter's added cost (benches/upstream.rs): the rmcp 2025-era stdio server
# `upstream-rmcp` and the deploy example's rmcp 2026 service over HTTP, each reached directly,
# through `Upstream`, and through `ElicitationLayer` + `Upstream`, in one process run. Builds the
# server and the bench (release), runs it, and prints the machine, the commit, the date and the
# bench's Markdown tables (per request over stdio and HTTP, then whole elicitation flows).
#
#   scripts/upstream_bench.sh                     # everything, about 2 minutes after the builds
#   scripts/upstream_bench.sh stdio               # only some parts: stdio, http, flows
#   UPSTREAM_BENCH_ROUNDS=100 UPSTREAM_BENCH_FLOWS=100 scripts/upstream_bench.sh   # shorter
#   scripts/upstream_bench.sh --short             # seconds: what .ci/run runs (a check that the
#                                                 # bench works, not figures to quote)
#
# Settings: UPSTREAM_BENCH_ROUNDS, _BATCH, _FLOWS, _FLOW_ROUNDS, _CONCURRENCY, _SESSIONS (see the bench's
# module docs); --short sets those not set to a few seconds' worth. .ci/run runs it --short: a
# report, not a gate (it fails only when the bench itself breaks).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = "--short" ]; then
    shift
    export UPSTREAM_BENCH_ROUNDS=${UPSTREAM_BENCH_ROUNDS:-10} UPSTREAM_BENCH_BATCH=${UPSTREAM_BENCH_BATCH:-10}
    export UPSTREAM_BENCH_FLOWS=${UPSTREAM_BENCH_FLOWS:-50} UPSTREAM_BENCH_FLOW_ROUNDS=${UPSTREAM_BENCH_FLOW_ROUNDS:-1}
fi
target=${CARGO_TARGET_DIR:-target}

cargo build --quiet --release -p tower-elicitation-tools --bin upstream-rmcp
cargo bench --quiet --bench upstream --no-run
export MCP_UPSTREAM_RMCP=${MCP_UPSTREAM_RMCP:-$target/release/upstream-rmcp}

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (with uncommitted changes)" || true)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "upstream adapter bench: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit$dirty"
echo "machine: $(nproc) CPUs ($cpu), $(rustc --version), load average $(cut -d' ' -f1-3 /proc/loadavg)"
cargo bench --quiet --bench upstream -- "$@"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
