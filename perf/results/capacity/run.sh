#!/usr/bin/env bash
# Runs the capacity table's knees (README.md), one (workload, front) at a time, never two
# fleets at once. Resumable: a (workload, front) whose knee.json exists is skipped; one
# without it (a run that was stopped) is started again from nothing.
# Needs a release build and the Qwen3 fixture:
#   cargo build --release --workspace --bins && bash shards/fixtures/fetch.sh qwen3
#   bash bench/peers/install.sh
# Usage: perf/results/capacity/run.sh [WORKLOAD ...]   (default: all, in the table's order)
# FRONTS="a b" limits the fronts (default: all six, in README.md's order).
set -euo pipefail
dir=perf/results/capacity
bench=${BENCH:-target/release/inferrail-bench}
# workload  time-scale  low (round_robin's knee, wall req/s, knees-cache-blind / knee-w1)  min-samples
table="
w4  1.0   32.9   1000
w6  0.5   39.22  1000
hot 0.25  24     1000
mix 0.25  21.28  1000
w2  0.25  22.01  1000
w1  0.25  14.43  1000
w5  4.0   49.15  6000
w3  0.25  6.039  1000
w8  0.25  1.5    1000
"
fronts=${FRONTS:-round_robin cost_model least_request peer:sglang.cache_aware peer:vllm.cache_aware peer:nginx}
workloads=${*:-$(awk 'NF {print $1}' <<< "$table")}
for f in $fronts; do
    for w in $workloads; do
        row=$(awk -v w="$w" '$1 == w' <<< "$table")
        [ -n "$row" ] || { echo "run.sh: unknown workload $w" >&2; exit 2; }
        read -r _ scale low samples <<< "$row"
        high=$(awk -v l="$low" 'BEGIN { printf "%.4g", l * 1.5 }')
        out="$dir/runs/$w/${f//:/_}"
        if [ -f "$out/knee.json" ]; then
            echo "run.sh: $w $f done ($out/knee.json)"
            continue
        fi
        rm -rf "$out"
        "$bench" knee "$dir/spec.toml" --workload "$w" --front "$f" --low "$low" --high "$high" \
            --cap 128 --time-scale "$scale" --min-samples "$samples" --out "$out"
    done
done
