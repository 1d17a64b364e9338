#!/usr/bin/env bash
# Load run: the `deploy` example server (rmcp behind ElicitationLayer) in-process on a loopback
# port, driven by tools/src/bin/load.rs (release build) with complete three-round flows (first call;
# invalid answer and the layer's re-ask; valid answer and deploy) from concurrent clients over
# real HTTP.
#
#   scripts/load.sh                                       # 20,000 flows from 64 clients (CI)
#   LOAD_FLOWS=2000 LOAD_CONCURRENCY=16 scripts/load.sh   # smaller
#   LOAD_ARGS=--sse scripts/load.sh                       # event-stream responses only
#   LOAD_ARGS=--legacy scripts/load.sh                    # 2025-era clients only
#   LOAD_ARGS="--url http://127.0.0.1:3000/mcp" scripts/load.sh   # a server already running
#   MCP_REDIS_URL=redis://127.0.0.1:6379 scripts/load.sh  # and the two-replica run (CI)
#   LOAD_REPLICAS=2 scripts/load.sh                       # only the two-replica run
#
# Without LOAD_ARGS it runs JSON responses, then event-stream responses, then the same flow as
# a 2025-era client through the legacy bridge (`--legacy`: one session per client, the
# questions on the call's stream, the answers POSTed back), on one replica. With MCP_REDIS_URL
# set (or LOAD_REPLICAS=2) it then runs two replicas in one process, on two ports, sharing the
# keys and Redis, with single-use tokens: the load generator sends each request of a flow to the
# other replica than the one before, and replays each flow's last token (to the other replica)
# once the flow is done. Every replay must be refused, or the flow fails. Then the same two
# replicas for 2025-era clients (`--legacy --replicas 2`): the bridges keep their sessions and
# waiting calls in Redis, each session is opened on one replica and confirmed on the other, each
# flow's call goes to the other replica than the flow before, and its answers are POSTed to the
# replica that does not hold the call's stream.
#
# With MCP_REDIS_URL set (or LOAD_CHAOS=1), the two-replica runs are then repeated against a Redis
# of the load generator's own (`--chaos`: `redis-server` on a free port), which is stopped for
# 3 s, frozen for 3 s and restarted empty while the flows run: such a run fails on any accepted
# replay, any deployment without a verified answer, any stranded call after the run, or a replica
# that did not recover on its own; it prints the recovery time after each fault.
#   LOAD_CHAOS=1 LOAD_REPLICAS=2 scripts/load.sh           # only the chaos runs
#
# Prints the example's one line (flows/s, p50 and p99 latency per request, errors, RSS after
# the warm-up and after the run) and fails on any error, or when the peak RSS after the run
# exceeds the RSS after the warm-up by more than LOAD_MAX_RSS_GROWTH (default 0.20 = 20 %).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
flows="${LOAD_FLOWS:-20000}"
concurrency="${LOAD_CONCURRENCY:-64}"
growth="${LOAD_MAX_RSS_GROWTH:-0.20}"

cargo build --quiet --release -p tower-elicitation-tools --bin load
# Both response modes unless LOAD_ARGS picks options of its own.
if [ -n "${LOAD_ARGS:-}" ]; then
    modes=("$LOAD_ARGS")
else
    modes=("" "--sse" "--legacy")
fi
if [ "${LOAD_REPLICAS:-1}" = 2 ]; then
    modes=()
fi
if [ -n "${MCP_REDIS_URL:-}" ] || [ "${LOAD_REPLICAS:-1}" = 2 ]; then
    redis="${MCP_REDIS_URL:-redis://127.0.0.1:6379}"
    modes+=("--replicas 2 --single-use redis --replay --redis $redis")
    modes+=("--legacy --replicas 2 --single-use redis --redis $redis")
fi
if [ -n "${MCP_REDIS_URL:-}" ] || [ "${LOAD_CHAOS:-}" = 1 ]; then
    if [ "${LOAD_CHAOS:-}" = 1 ] && [ "${LOAD_REPLICAS:-1}" = 2 ]; then
        modes=()
    fi
    if ! command -v redis-server >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2
        else
            echo "load.sh: the chaos runs need redis-server on PATH (Debian: apt-get install redis-server)" >&2
            exit 1
        fi
    fi
    modes+=("--replicas 2 --single-use redis --replay --chaos")
    modes+=("--legacy --replicas 2 --chaos")
fi
for mode in "${modes[@]}"; do
    # shellcheck disable=SC2086 # a mode is a list of options
    cargo run --quiet --release -p tower-elicitation-tools --bin load -- --flows "$flows" \
        --concurrency "$concurrency" --max-rss-growth "$growth" --max-secs 1200 $mode
done
