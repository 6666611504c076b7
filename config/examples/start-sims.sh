#!/usr/bin/env bash
# Start the three simulated engines that config/examples/local-3-replicas.yaml points to, in the
# background, and wait until each answers.
#
#   config/examples/start-sims.sh          # inferrail-sim on 127.0.0.1:8001, :8002, :8003
#   config/examples/start-sims.sh stop     # stop the ones this script started
#
# Each engine is `inferrail-sim --port 800N --enable-prompt-tokens-details --seed N`: vLLM's
# defaults (model sim-llama, block size 16, builtin:sim tokenizer, prefix caching on) plus the
# vLLM flag that makes every response's usage carry prompt_tokens_details.cached_tokens, the
# engine's own count of the prompt tokens it found in its prefix cache.
# The binary comes from ${INFERRAIL_BIN_DIR:-<repo>/target/release}; build it first with
#   cargo build --release -p inferrail-control -p inferrail-sim
# Logs and pids go to ${INFERRAIL_SIMS_DIR:-<repo>/target/sims}. Exit status 0 when all three
# answer; 1 (with the reason and the log's tail) when one does not, after stopping the others.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BIN_DIR="${INFERRAIL_BIN_DIR:-$REPO/target/release}"
SIM="$BIN_DIR/inferrail-sim"
RUN="${INFERRAIL_SIMS_DIR:-$REPO/target/sims}"
PORTS=(8001 8002 8003)

die() { echo "start-sims.sh: $*" >&2; exit 1; }

# Stops every engine whose pid file is in $RUN (only processes this script started).
stop_all() {
  local stopped=0 f pid
  for f in "$RUN"/sim-*.pid; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    if kill "$pid" 2> /dev/null; then
      stopped=$((stopped + 1))
    fi
    rm -f "$f"
  done
  echo "start-sims.sh: stopped $stopped engine(s)"
}

# True when something answers HTTP on 127.0.0.1:$1.
answers() { curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$1/v1/models"; }

case "${1:-start}" in
  stop) stop_all; exit 0 ;;
  start) ;;
  *) die "unknown argument '$1' (usage: start-sims.sh [stop])" ;;
esac

command -v curl > /dev/null || die "curl is needed to wait for the engines"
[ -x "$SIM" ] || die "$SIM not found; build it first: cargo build --release -p inferrail-control -p inferrail-sim (or set INFERRAIL_BIN_DIR)"
mkdir -p "$RUN"
for port in "${PORTS[@]}"; do
  if answers "$port"; then
    die "127.0.0.1:$port already answers (engines still running? stop them with: $0 stop)"
  fi
done

pids=()
for i in "${!PORTS[@]}"; do
  port="${PORTS[$i]}"
  log="$RUN/sim-$port.log"
  nohup "$SIM" --host 127.0.0.1 --port "$port" --enable-prompt-tokens-details --seed "$i" \
    > "$log" 2>&1 < /dev/null &
  echo $! > "$RUN/sim-$port.pid"
  pids+=("$!")
done

for i in "${!PORTS[@]}"; do
  port="${PORTS[$i]}"
  pid="${pids[$i]}"
  for _ in $(seq 100); do
    answers "$port" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  if ! answers "$port"; then
    echo "start-sims.sh: the engine on 127.0.0.1:$port did not come up; its log ($RUN/sim-$port.log):" >&2
    tail -5 "$RUN/sim-$port.log" >&2 || true
    stop_all > /dev/null
    exit 1
  fi
done

echo "start-sims.sh: three inferrail-sim engines (model sim-llama) are running:"
for i in "${!PORTS[@]}"; do
  echo "  http://127.0.0.1:${PORTS[$i]}  pid ${pids[$i]}  log $RUN/sim-${PORTS[$i]}.log"
done
echo "Stop them with: $0 stop   (or: kill ${pids[*]})"
