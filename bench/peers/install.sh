#!/usr/bin/env bash
# Installs the peers the benchmark harness can put in front of the simulators, next to
# inferrail: the SGLang router and the vLLM router (PyPI wheels with a Rust core, into a local
# venv) and nginx (Debian, as a cache-blind keep-alive proxy). Nothing is installed system-wide
# except nginx, and only when it is missing.
#
#   bench/peers/install.sh                 # venv at target/peers-venv
#   PEERS_VENV=/some/dir bench/peers/install.sh
#
# Re-running is cheap: the venv is kept when it already holds exactly the pinned versions.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${PEERS_VENV:-target/peers-venv}
SGLANG_ROUTER=${SGLANG_ROUTER:-sglang-router==0.3.2}
VLLM_ROUTER=${VLLM_ROUTER:-vllm-router==0.1.17}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.inferrail-peers"
WANT="$SGLANG_ROUTER $VLLM_ROUTER"

log() { printf '[peers] %s\n' "$*" >&2; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
    log "$VENV already holds $WANT"
else
    log "creating $VENV with $WANT"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$SGLANG_ROUTER" "$VLLM_ROUTER"
    printf '%s' "$WANT" >"$STAMP"
fi

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    log "nginx not found; installing it with apt-get (the system nginx service is not used)"
    SUDO=
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq nginx-light || $SUDO apt-get install -y -qq nginx
fi

# Smoke check: both launchers import and print their help without touching the network.
export HF_ENDPOINT=http://127.0.0.1:9 HF_HUB_OFFLINE=1
"$VENV/bin/python" -m sglang_router.launch_router --help >/dev/null
"$VENV/bin/vllm-router" --help >/dev/null
log "ready: $("$VENV/bin/pip" list 2>/dev/null | grep -E '^(sglang-router|vllm-router) ' | tr -s ' ' | paste -sd, -), nginx $(nginx -v 2>&1 | sed 's/.*nginx\///' || /usr/sbin/nginx -v 2>&1)"
