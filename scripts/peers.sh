#!/usr/bin/env bash
# End to end against the other SDKs: the same `deploy` tool (form `{approve: boolean (required),
# note: string (maxLength 200)}`, message `Deploy to {environment}?`) on each server below, driven
# over loopback by the load generator (tools/src/bin/load.rs) --url with its three-round flow (first call -> input_required;
# `approve: "yes"` -> input_required again; `approve: true` -> deployed, checked in
# structuredContent). A server that takes `approve: "yes"`, or re-asks without the question, fails
# the flow.
#
#   scripts/peers.sh                          # every server, 3 runs each (about 11 minutes)
#   PEERS_ONLY="deploy rmcp" scripts/peers.sh # servers whose name contains one of the words
#   PEERS_RUNS=1 PEERS_SECS=5 scripts/peers.sh
#   scripts/peers.sh --busy --check          # each server quiet and busy, then PASS/MISS per target
#
# Servers (sources in benches/peers/):
#   mcp-use          mcp-use 2.5.2 (npm), MCPServer.listen, SDK helpers + request-state codec
#   ts-sdk           @modelcontextprotocol/server 2.4.0, createMcpHandler + toNodeHandler
#   python-sdk       mcp 2.3.0 (PyPI), MCPServer + RequestStateBoundary, uvicorn, one worker
#   rmcp-hand-sse    rmcp 3.11, no layer, hand-written checks, rmcp's RequestStateCodec (SSE)
#   rmcp-hand-json   the same, JSON responses
#   deploy-sse       examples/deploy as shipped (rmcp behind ElicitationLayer, event streams)
#   deploy-json      examples/deploy with MCP_JSON_RESPONSE=1
#   deploy-legacy    examples/deploy, driven as a 2025-era client through its bridge (--legacy)
#   floor-sse        tools/src/bin/peers-floor.rs: the three answers as canned bytes over hyper,
#   floor-json       no MCP at all (the floor every row is read against)
#   bridge-1-replica  the load generator serving examples/deploy's stack in process (no --url,
#   bridge-2-replicas both cores), 2025-era clients (--legacy): one replica, then two sharing keys
#                     and Redis (MCP_REDIS_URL, else 127.0.0.1:6379) with single-use tokens
#
# --busy: every server is measured twice per run, on a quiet machine and on a busy one: while it
# runs, a CPU burner (`yes`, nice 0, one per core, killed with the run) shares each core with the
# server and the load generator, as other work on a shared host would. Both states come from
# the same run, so their ratios can be read side by side.
#
# Each server runs pinned to core 0 (taskset -c 0), the load generator to core 1, one server at
# a time, restarted for every run; the runs go round the servers in turn (run 1 of each, then
# run 2, ...). Each run: a warm-up of PEERS_WARMUP flows (300), then PEERS_SECS seconds (10) of
# flows from PEERS_CONCURRENCY clients (16). The server's peak RSS (VmHWM) and the CPU time it
# used during the load run are read from /proc; bash's `time` gives the load generator's. Rust servers log at warn, mcp-use's request log is off, uvicorn logs warnings
# only, and mcp-use's telemetry is off (MCP_USE_ANONYMIZED_TELEMETRY=false): all traffic stays on
# 127.0.0.1.
#
# Installs what it needs under .cache/peers/ on first use (npm: node@22, mcp-use, the TS SDK;
# PyPI: mcp, uvicorn[standard] in a venv); only the package registries are used. Results go to
# .cache/peers/results/ (one load line per run, runs.json); scripts/peers_report.py prints the
# table, writes docs/peers.svg and, with --check, PASS/MISS per target (exiting 1 on a MISS).
# Not run by CI.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${PEERS_CACHE:-$root/.cache/peers}"
runs="${PEERS_RUNS:-3}"
secs="${PEERS_SECS:-10}"
warmup="${PEERS_WARMUP:-300}"
concurrency="${PEERS_CONCURRENCY:-16}"
only="${PEERS_ONLY:-}"
states=(quiet)
report_args=()
for arg in "$@"; do
    case "$arg" in
    --busy) states=(quiet busy) ;;
    *) report_args+=("$arg") ;;
    esac
done
results="$cache/results"
node="$cache/node/node_modules/node/bin/node"
python="$cache/venv/bin/python"

MCP_USE_VERSION=2.5.2
TS_SDK_VERSION=2.4.0
TS_NODE_ADAPTER_VERSION=2.1.2 # @modelcontextprotocol/node: its newest, peer of server ^2.4.0
PYTHON_SDK_VERSION=2.3.0

log() { printf 'peers.sh: %s\n' "$*" >&2; }

# ---- install (or reuse) the peers ----
npm_version() { # dir package
    "$node" -p "require('$1/node_modules/$2/package.json').version" 2>/dev/null || true
}
if [[ "$("$node" -p 'process.versions.node.split(".")[0]' 2>/dev/null || true)" != 22 ]]; then
    log "installing node@22 into $cache/node"
    mkdir -p "$cache/node"
    printf '{ "private": true, "allowScripts": { "node": true } }\n' >"$cache/node/package.json"
    npm install --prefix "$cache/node" --no-audit --no-fund --loglevel=error node@22 >&2
fi
if [[ "$(npm_version "$cache/ts-sdk" @modelcontextprotocol/server)" != "$TS_SDK_VERSION" ||
    "$(npm_version "$cache/ts-sdk" @modelcontextprotocol/node)" != "$TS_NODE_ADAPTER_VERSION" ]]; then
    log "installing @modelcontextprotocol/server@$TS_SDK_VERSION into $cache/ts-sdk"
    mkdir -p "$cache/ts-sdk"
    printf '{ "private": true, "type": "module" }\n' >"$cache/ts-sdk/package.json"
    npm install --prefix "$cache/ts-sdk" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server@$TS_SDK_VERSION" \
        "@modelcontextprotocol/node@$TS_NODE_ADAPTER_VERSION" zod@4 >&2
fi
if [[ "$(npm_version "$cache/mcp-use" mcp-use)" != "$MCP_USE_VERSION" ]]; then
    log "installing mcp-use@$MCP_USE_VERSION into $cache/mcp-use"
    mkdir -p "$cache/mcp-use"
    printf '{ "private": true, "type": "module" }\n' >"$cache/mcp-use/package.json"
    npm install --prefix "$cache/mcp-use" --no-audit --no-fund --loglevel=error \
        "mcp-use@$MCP_USE_VERSION" >&2
fi
if [[ "$("$python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)" != "$PYTHON_SDK_VERSION" ]]; then
    log "installing mcp==$PYTHON_SDK_VERSION and uvicorn[standard] into $cache/venv"
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet "mcp==$PYTHON_SDK_VERSION" 'uvicorn[standard]' >&2
fi
# Node resolves packages from the script's own folder: run each JS server from its install.
cp "$root/benches/peers/ts-sdk/server.mjs" "$cache/ts-sdk/server.mjs"
cp "$root/benches/peers/mcp-use/server.mjs" "$cache/mcp-use/server.mjs"

# ---- build the Rust servers and the load generator ----
cargo build --quiet --release --manifest-path "$root/Cargo.toml" --example deploy
cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p tower-elicitation-tools \
    --bin load --bin peers-rmcp-handwritten --bin peers-floor
target_dir=$(cargo metadata --manifest-path "$root/Cargo.toml" --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target_dir/release/examples" # deploy
tools="$target_dir/release"        # load, peers-rmcp-handwritten, peers-floor

redis_url="${MCP_REDIS_URL:-redis://127.0.0.1:6379}"

# The peers' state keys (32 bytes), and examples/deploy's keyring from the same bytes.
peer_key="peers-sh-request-state-key-32-bytes!"
deploy_keys="k1:$(python3 -c 'import base64; print(base64.urlsafe_b64encode(b"peers-sh-request-state-key-32-bytes!").rstrip(b"=").decode())')"

# name | re-ask hint the load generator requires | load options | command (run with env)
servers=(
    "mcp-use|Deploy to ||cd '$cache/mcp-use' && MCP_USE_ANONYMIZED_TELEMETRY=false exec '$node' server.mjs"
    "ts-sdk|Deploy to ||cd '$cache/ts-sdk' && exec '$node' server.mjs"
    "python-sdk|Deploy to ||exec '$python' '$root/benches/peers/python-sdk/server.py'"
    "rmcp-hand-sse|Deploy to |--sse|MCP_ADDR=127.0.0.1:\$PORT exec '$tools/peers-rmcp-handwritten'"
    "rmcp-hand-json|Deploy to ||MCP_JSON_RESPONSE=1 MCP_ADDR=127.0.0.1:\$PORT exec '$tools/peers-rmcp-handwritten'"
    "deploy-sse|Please correct: Approve.|--sse|RUST_LOG=warn MCP_REQUEST_STATE_KEYS='$deploy_keys' MCP_ADDR=127.0.0.1:\$PORT exec '$bin/deploy'"
    "deploy-json|Please correct: Approve.||MCP_JSON_RESPONSE=1 RUST_LOG=warn MCP_REQUEST_STATE_KEYS='$deploy_keys' MCP_ADDR=127.0.0.1:\$PORT exec '$bin/deploy'"
    "deploy-legacy|Please correct: Approve.|--legacy|RUST_LOG=warn MCP_REQUEST_STATE_KEYS='$deploy_keys' MCP_ADDR=127.0.0.1:\$PORT exec '$bin/deploy'"
    "floor-sse|Deploy to |--sse|MCP_ADDR=127.0.0.1:\$PORT exec '$tools/peers-floor'"
    "floor-json|Deploy to ||MCP_JSON_RESPONSE=1 MCP_ADDR=127.0.0.1:\$PORT exec '$tools/peers-floor'"
)
selected=()
for entry in "${servers[@]}"; do
    name=${entry%%|*}
    if [[ -z "$only" ]]; then
        selected+=("$entry")
        continue
    fi
    for word in $only; do
        if [[ "$name" == *"$word"* ]]; then
            selected+=("$entry")
            break
        fi
    done
done
if [[ ${#selected[@]} -eq 0 ]]; then
    log "error: no server matches PEERS_ONLY=$only"
    exit 1
fi

rm -rf "$results"
mkdir -p "$results"

server_pid=
stop_server() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=
}
# The busy state's burners: one `yes` per core, bounded by `timeout` in case this script dies.
burners=()
start_burners() {
    for core in $(seq 0 $(($(nproc) - 1))); do
        timeout $((secs + warmup / 10 + 180)) taskset -c "$core" yes >/dev/null &
        burners+=($!)
    done
}
stop_burners() {
    if [[ ${#burners[@]} -gt 0 ]]; then
        kill "${burners[@]}" 2>/dev/null || true
        wait "${burners[@]}" 2>/dev/null || true
    fi
    burners=()
}
trap 'stop_server; stop_burners' EXIT

# CPU time (user + system, in clock ticks) a process has used so far.
cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}
clk_tck=$(getconf CLK_TCK)

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

started=$(date +%s)
for run in $(seq 1 "$runs"); do
  for state in "${states[@]}"; do
    for entry in "${selected[@]}"; do
        IFS='|' read -r name hint options command <<<"$entry"
        if [[ "$state" == busy ]]; then
            name="$name+busy"
            start_burners
        fi
        port=$(free_port)
        server_log="$results/$name.run$run.server.log"
        PORT=$port PEER_KEY="$peer_key" taskset -c 0 bash -c "$command" >"$server_log" 2>&1 &
        server_pid=$!
        for _ in $(seq 1 150); do
            if ! kill -0 "$server_pid" 2>/dev/null; then
                log "error: $name exited; its log:"
                cat "$server_log" >&2
                exit 1
            fi
            if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
                break
            fi
            sleep 0.1
        done
        url="http://127.0.0.1:$port/mcp"
        ticks=$(cpu_ticks "$server_pid")
        # The load generator's own wall and CPU time (bash's `time`): whether it kept up.
        TIMEFORMAT='%R %U %S'
        # shellcheck disable=SC2086 # options is a list of options
        { time taskset -c 1 "$tools/load" --url "$url" --duration "$secs" --warmup "$warmup" \
            --concurrency "$concurrency" --max-secs $((secs + 120)) --reask-hint "$hint" \
            $options >"$results/$name.run$run.load.out" 2>"$results/$name.run$run.load.err"; } \
            2>"$results/$name.run$run.time" || true
        line=$(cat "$results/$name.run$run.load.out")
        server_cpu=$(awk -v a="$ticks" -v b="$(cpu_ticks "$server_pid")" -v hz="$clk_tck" \
            'BEGIN {printf "%.2f", (b - a) / hz}')
        read -r load_wall load_user load_sys <"$results/$name.run$run.time" || true
        hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$server_pid/status" 2>/dev/null || echo 0)
        stop_server
        stop_burners
        if [[ "$line" != load:* ]]; then
            line="load: failed flows/s=0 errors=-1"
            log "$name run $run: the load generator failed:"
            cat "$results/$name.run$run.load.err" >&2
        fi
        printf '%s\t%s\t%s\tserver_cpu_s=%s load_wall_s=%s load_cpu_s=%s %s\n' "$name" "$run" \
            "${hwm:-0}" "$server_cpu" "${load_wall:-0}" \
            "$(awk -v u="${load_user:-0}" -v s="${load_sys:-0}" 'BEGIN {printf "%.2f", u + s}')" \
            "$line" >>"$results/runs.tsv"
        log "$name run $run: $(sed -E 's/.*(flows\/s=[0-9]+) (p50_ms=[0-9.]+) (p99_ms=[0-9.]+) (errors=[-0-9]+).*/\1 \2 \3 \4/' <<<"$line") server_peak_rss_kib=${hwm:-0} server_cpu_s=$server_cpu load_wall_s=${load_wall:-0}"
        if [[ -s "$results/$name.run$run.load.err" ]]; then
            head -3 "$results/$name.run$run.load.err" >&2
        fi
    done
    # The bridge across replicas: the load generator serves examples/deploy's stack itself (no
    # --url), on both cores, once with one replica and once with two sharing keys and Redis
    # (sessions and answers in Redis, single-use tokens). Its own CPU time stands for the server's.
    if [[ -z "$only" || "$only" == *bridge* ]]; then
        for variant in "bridge-1-replica|--legacy" \
            "bridge-2-replicas|--legacy --replicas 2 --single-use redis --redis $redis_url"; do
            name=${variant%%|*}
            options=${variant#*|}
            if [[ "$state" == busy ]]; then
                name="$name+busy"
                start_burners
            fi
            TIMEFORMAT='%R %U %S'
            # shellcheck disable=SC2086 # options is a list of options
            { time "$tools/load" --duration "$secs" --warmup "$warmup" \
                --concurrency "$concurrency" --max-secs $((secs + 120)) $options \
                >"$results/$name.run$run.load.out" 2>"$results/$name.run$run.load.err"; } \
                2>"$results/$name.run$run.time" || true
            stop_burners
            line=$(grep '^load:' "$results/$name.run$run.load.out" || true)
            read -r load_wall load_user load_sys <"$results/$name.run$run.time" || true
            load_cpu=$(awk -v u="${load_user:-0}" -v s="${load_sys:-0}" 'BEGIN {printf "%.2f", u + s}')
            if [[ "$line" != load:* ]]; then
                line="load: failed flows/s=0 errors=-1"
                log "$name run $run: the load generator failed:"
                cat "$results/$name.run$run.load.err" >&2
            fi
            printf '%s\t%s\t%s\tserver_cpu_s=%s load_wall_s=%s load_cpu_s=%s %s\n' "$name" "$run" \
                0 "$load_cpu" "${load_wall:-0}" "$load_cpu" "$line" >>"$results/runs.tsv"
            log "$name run $run: $(sed -E 's/.*(flows\/s=[0-9]+) (p50_ms=[0-9.]+) (p99_ms=[0-9.]+) (errors=[-0-9]+).*/\1 \2 \3 \4/' <<<"$line") cpu_s=$load_cpu"
        done
    fi
  done
done
elapsed=$(($(date +%s) - started))
log "measured in ${elapsed} s"

python3 "$root/scripts/peers_report.py" --results "$results" --seconds "$elapsed" \
    --runs "$runs" --secs "$secs" --concurrency "$concurrency" ${report_args[@]+"${report_args[@]}"}
