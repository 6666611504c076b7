#!/usr/bin/env bash
# Reruns every cache-blind knee of README.md, one workload at a time (never two fleets at
# once on 2 cores). Needs a release build and the Qwen3 fixture:
#   cargo build --release --workspace --bins && bash shards/fixtures/fetch.sh qwen3
# Usage: perf/results/knees-cache-blind/run.sh [WORKLOAD ...]   (default: all of them, in the order given)
set -euo pipefail
dir=perf/results/knees-cache-blind
bench=${BENCH:-target/release/inferrail-bench}
# workload  time-scale  low  high  min-samples  (wall req/s; model req/s = wall x time-scale)
table="
w2  0.25  4   12  1000
w3  0.25  4   12  1000
w4  1.0   25  75  1000
w5  4.0   40  120  6000
w6  0.5   15  45  1000
w8  0.25  6   18  1000
mix 0.25  10  30  1000
hot 0.25  8   24  1000
"
for w in ${*:-w2 w3 w4 w5 w6 w8 mix hot}; do
    row=$(awk -v w="$w" '$1 == w' <<< "$table")
    [ -n "$row" ] || { echo "run.sh: unknown workload $w (known: w2 w3 w4 w5 w6 w8 mix hot)" >&2; exit 2; }
    read -r _ scale low high samples <<< "$row"
    "$bench" knee "$dir/spec.toml" --workload "$w" --low "$low" --high "$high" \
        --time-scale "$scale" --min-samples "$samples" --out "$dir/runs/$w"
done
