#!/usr/bin/env bash
# Where reconstruct's time goes, by stage: decode, map, match/replay, encode, write, other.
# Writes the synthetic halo trace of `reconstruct_throughput` (8 ranks; EVF_BENCH_EVENTS per
# rank, default 2 000 000), runs `evenflush reconstruct --threads 1` under `perf record` for each
# model, and sums the self time of every sampled function into the stage its crate/module names.
# Shares of the samples, not seconds, so a loaded machine changes them little.
# Usage: bash benches/reconstruct/stages.sh [subtract|replay ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
models=("${@:-subtract replay}")
work=$(mktemp -d /tmp/evf-stages.XXXXXX)
trap '[ -n "${EVF_STAGES_KEEP:-}" ] || rm -rf "$work"' EXIT
cargo build --release -q --bin evenflush
EVF_BENCH_WRITE_ONLY="$work/trace" EVF_BENCH_EVENTS="${EVF_BENCH_EVENTS:-2000000}" \
    cargo bench -q --bench reconstruct_throughput
for model in ${models[@]}; do
    # Timed without perf (its unwinding slows the run); the profile gives only the shares.
    rm -rf "$work/out"
    start=$(date +%s.%N)
    target/release/evenflush reconstruct "$work/trace" --out "$work/out" \
        --remove both --model "$model" --threads 1 >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
    end=$(date +%s.%N)
    rm -rf "$work/out"
    perf record -q -F 499 --call-graph dwarf,16384 -o "$work/perf.data" -- \
        target/release/evenflush reconstruct "$work/trace" --out "$work/out" \
        --remove both --model "$model" --threads 1 >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
    events=$(target/release/evenflush info "$work/trace" | awk '/^events/ {print $2}')
    perf script -i "$work/perf.data" --inline -F ip,sym 2>/dev/null > "$work/stacks.txt"
    python3 benches/reconstruct/stages.py "$model" "$events" "$start" "$end" "$work/stacks.txt"
done
