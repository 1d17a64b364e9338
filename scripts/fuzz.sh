#!/usr/bin/env bash
# Runs every cargo-fuzz target under fuzz/ for a bounded time and fails on any crash.
#
#   scripts/fuzz.sh                         # each target for 60 s (what CI runs)
#   FUZZ_SECS=600 scripts/fuzz.sh inbound   # one target, longer
#   FUZZ_SEED=7 scripts/fuzz.sh             # libFuzzer's random seed (default: a fresh one)
#
# Under CI (CI=true) the seed is fixed (FUZZ_SEED, default 20261130) and the working corpus
# starts from the seeds alone, so a CI run replays the same mutations as any other CI run: a
# red CI is a finding to reproduce, never noise. Explore with fresh seeds locally.
#
# Targets (fuzz/fuzz_targets/): `token` (the token decoder, and seal/open of arbitrary claims),
# `sse` (the SSE parser and rewriter on arbitrary inner streams cut at arbitrary chunk
# boundaries), `inbound` (arbitrary request bytes and headers through the whole layer).
#
# Seeds are committed in fuzz/seeds/<target>/ (written by fuzz/seeds/make_seeds.py); libFuzzer
# grows a working corpus in fuzz/corpus/<target>/, which is git-ignored, as are
# fuzz/artifacts/ (crash inputs) and fuzz/target/. A crashing input is kept in
# fuzz/artifacts/<target>/; reproduce it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<crash-file>
#
# The fuzz build goes to FUZZ_TARGET_DIR (default fuzz/target); .ci/run points it at a directory
# kept per machine, so that a clean checkout does not build the sanitized dependencies again.
#
# Needs cargo-fuzz (installed from crates.io when absent) and libFuzzer's nightly-only
# sanitizer flags, which the stable toolchain accepts with RUSTC_BOOTSTRAP=1.
# Prints one line per target (time, executions, executions per second, corpus size) and exits
# non-zero when a target crashed, leaked, timed out or failed to build.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
secs="${FUZZ_SECS:-60}"
seed="${FUZZ_SEED:-}"
if [ -z "$seed" ] && [ "${CI:-}" = "true" ]; then
    seed=20261130
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(token sse inbound)
fi
log() { printf 'fuzz.sh: %s\n' "$*" >&2; }

if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
target_dir="${FUZZ_TARGET_DIR:-$root/fuzz/target}"

log "building ${targets[*]}"
for target in "${targets[@]}"; do
    cargo fuzz build --target-dir "$target_dir" "$target"
done

logs="$root/fuzz/logs"
mkdir -p "$logs"
failed=0
summary=()
for target in "${targets[@]}"; do
    corpus="fuzz/corpus/$target"
    mkdir -p "$corpus" "fuzz/artifacts/$target"
    log "running $target for ${secs} s"
    status=0
    if [ "${CI:-}" = "true" ]; then
        rm -rf "$corpus" && mkdir -p "$corpus"
    fi
    cargo fuzz run --target-dir "$target_dir" "$target" "$corpus" "fuzz/seeds/$target" -- ${seed:+-seed="$seed"} \
        -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
        >"$logs/$target.log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$target.log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logs/$target.log" | tail -1)
    units=$(find "$corpus" -type f | wc -l)
    if [ "$status" -ne 0 ]; then
        failed=1
        summary+=("$target: FAILED (exit $status) after ${execs:-?} executions")
        log "$target FAILED; the end of its log ($logs/$target.log):"
        tail -n 60 "$logs/$target.log" >&2
        ls -l "fuzz/artifacts/$target" >&2 || true
    else
        summary+=("$target: ${secs} s, ${execs:-?} executions (${rate:-?}/s), corpus ${units} inputs, no crash")
    fi
done
for line in "${summary[@]}"; do
    echo "fuzz: $line"
done
exit "$failed"
