# jumppod: `make demo` shows it working, `make test` proves it. Both set up what they need
# (the wasm32-wasip1 target, clippy and rustfmt) on a machine that has only rustup's Rust.

SHELL        := /bin/bash
CARGO        ?= cargo
WASM_TARGET  := wasm32-wasip1
TARGET_DIR   := $(CURDIR)/target
POLICY_WASM  := $(TARGET_DIR)/$(WASM_TARGET)/release/jumppod_policy.wasm
ACCEPT_ALL_WASM := $(TARGET_DIR)/$(WASM_TARGET)/release/jumppod_accept_all.wasm
export JUMPPOD_POLICY_WASM := $(POLICY_WASM)
export JUMPPOD_ACCEPT_ALL_WASM := $(ACCEPT_ALL_WASM)

.PHONY: all setup policy accept-all test lint fmt unit demo bench e2e-kwctl clean

all: policy

## setup: install the wasm32-wasip1 target, clippy and rustfmt when missing
setup:
	@rustup target list --installed | grep -qx '$(WASM_TARGET)' || rustup target add $(WASM_TARGET)
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy
	@rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt

## policy: build the Kubewarden policy (policy.wasm at the top of the repo)
policy: setup
	$(CARGO) build -p jumppod-policy --target $(WASM_TARGET) --release
	cp $(POLICY_WASM) policy.wasm
	@echo "policy.wasm: $$(wc -c < policy.wasm) bytes"

## accept-all: the bench's floor, a waPC guest that accepts without reading (tests/fixtures/accept-all)
accept-all: setup
	$(CARGO) build -p jumppod-accept-all --target $(WASM_TARGET) --release

## lint: formatting and clippy, warnings are errors
lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## unit: every test of the workspace (the policy Wasm is built first: the tests load it),
## then one line that adds up every test binary's result
unit: policy
	set -o pipefail; $(CARGO) test --workspace --no-fail-fast 2>&1 | tee $(TARGET_DIR)/test.log
	@awk '/^test result:/ {p += $$4; f += $$6} END {printf "tests: %d passed, %d failed\n", p, f}' $(TARGET_DIR)/test.log

## test: what CI runs
test: policy lint unit

## demo: the policy on example requests, then the host's upgrade story against the simulator
demo: policy
	$(CARGO) run -q -p jumppod-host -- demo

## bench: criterion benchmarks (policy through waPC, simulator, host)
bench: policy accept-all
	$(CARGO) bench --workspace

## e2e-kwctl: kwctl run/annotate on the fixtures, on machines that have kwctl and bats
e2e-kwctl: policy
	tests/e2e-kwctl/run.sh

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -f policy.wasm annotated-policy.wasm
