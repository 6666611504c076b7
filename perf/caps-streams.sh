#!/usr/bin/env bash
# Fleet-wide caps under many concurrent streams (ADR 016): N concurrent SSE streams through a
# gateway on 2 cores with the default caps (max_concurrency 512, max_pending 256) in front of
# three simulators, repeated R times; prints the refusals and each replica's high-water mark.
# usage: perf/caps-streams.sh [BIN_DIR] [STREAMS] [ROUNDS]   (BIN_DIR default target/release)
set -euo pipefail
bin=${1:-target/release}; streams=${2:-1000}; rounds=${3:-5}
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n 65536 2>/dev/null || true
ports=(); for i in 0 1 2; do
  p=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  "$bin/inferrail-sim" --port "$p" --max-num-seqs 512 >"$work/sim$i.log" 2>&1 &
  ports+=("$p")
done
gw=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
admin=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
{
  printf 'server: {listen: "127.0.0.1:%s", admin_listen: "127.0.0.1:%s", cores: 2, request_timeout: 120s}\n' "$gw" "$admin"
  printf 'models: [{name: sim-llama, policy: least_request}]\nreplicas:\n'
  for i in 0 1 2; do printf '  - {id: r%s, url: "http://127.0.0.1:%s", models: [sim-llama]}\n' "$i" "${ports[$i]}"; done
} >"$work/gw.yaml"
"$bin/inferrail" serve --config "$work/gw.yaml" >"$work/gw.log" 2>&1 &
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$admin/health" >/dev/null && break; sleep 0.1; done
echo '{"model": "sim-llama", "stream": true, "max_tokens": 64, "messages": [{"role": "user", "content": "hello there, how are you"}]}' >"$work/body.json"
for r in $(seq "$rounds"); do
  "$bin/inferrail-bench" streams --url "http://127.0.0.1:$gw/v1/chat/completions" --streams "$streams" \
    --body-file "$work/body.json" --json "$work/r$r.json" >/dev/null 2>&1 || true
  python3 - "$work/r$r.json" "$r" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print("round", sys.argv[2], {k: v for k, v in d.items() if not isinstance(v, (list, dict))})
PY
done
curl -s "http://127.0.0.1:$admin/metrics" | grep -E '^inferrail_(errors_total|requests_total)' | grep -v ' 0$' || true
