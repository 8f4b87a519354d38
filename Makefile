# jumppod: `make demo` shows it working, `make test` proves it. Both set up what they need
# (the wasm32-wasip1 target, clippy and rustfmt; kubectl from Debian for the tests; the real
# control plane built from Go modules) on a machine that has only the Rust and Go toolchains.

SHELL        := /bin/bash
CARGO        ?= cargo
WASM_TARGET  := wasm32-wasip1
TARGET_DIR   := $(CURDIR)/target
POLICY_WASM  := $(TARGET_DIR)/$(WASM_TARGET)/release/jumppod_policy.wasm
POLICY_SRC   := $(shell find src policy/src -name '*.rs') Cargo.toml Cargo.lock policy/Cargo.toml
ACCEPT_ALL_WASM := $(TARGET_DIR)/$(WASM_TARGET)/release/jumppod_accept_all.wasm
SPIN_WASM    := $(TARGET_DIR)/$(WASM_TARGET)/release/jumppod_spin.wasm
NO_WASM_DIR  := $(TARGET_DIR)/no-wasm
export JUMPPOD_POLICY_WASM := $(POLICY_WASM)
export JUMPPOD_ACCEPT_ALL_WASM := $(ACCEPT_ALL_WASM)
export JUMPPOD_SPIN_WASM := $(SPIN_WASM)
export JUMPPOD_NO_WASM_BIN := $(NO_WASM_DIR)/debug/jumppod
# kwctl's command line on jumppod's waPC runtime (tests/kwctl): the policy's kwctl suite runs
# with it where kwctl is not installed.
KWCTL_WAPC   := $(TARGET_DIR)/debug/kwctl-wapc
export JUMPPOD_KWCTL_WAPC := $(KWCTL_WAPC)
CONTROLPLANE := $(TARGET_DIR)/controlplane/jumppod-controlplane
HELM         := $(TARGET_DIR)/tools/helm
HELM_VERSION := v3.22.0
CHART        := charts/jumppod
export JUMPPOD_HELM := $(HELM)
# One feature set for every cargo build of `make test` and `make check` (clippy, the tests, the
# real-node and in-cluster tests, the web tests' oracle), so each crate is compiled once per
# profile. `real-node` turns on `real-cluster`; the real-node and in-cluster test binaries are
# built with the rest but run only by `make real-node-scenarios` (`test = false`).
FEATURES     := jumppod-host/real-node,jumppod-e2e/real-cluster
# Clippy lints the workspace's crates while the test build compiles them: clippy-driver is rustc
# with clippy's lints, and as cargo's wrapper for the workspace's own crates (what `cargo clippy`
# sets up for `cargo check`) it compiles them as well. So the dependencies are compiled once,
# not checked by clippy and then compiled again. CLIPPY_ARGS is how cargo-clippy passes `-- -D
# warnings` to the driver. The wrapper is part of the workspace crates' metadata hash: a plain
# `cargo test` beside it builds those crates (not the dependencies) once more, in files of its
# own, and never skips the lints of a linted build.
TEST_CARGO   := env RUSTC_WORKSPACE_WRAPPER=$$(rustup which clippy-driver) \
  CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ $(CARGO)
# `make test`'s stages: each one's lines prefixed with its name, its minutes summed up at the end.
STAGES       := $(TARGET_DIR)/stages.tsv
STAGE        := .ci/stage $(STAGES)
NICE         := nice -n 10

.PHONY: dstack-venv image image-bin image-check publish all setup check test-build fmt-check packages docs-check docs-reference dist kubectl sshd policy accept-all spin no-wasm test lint chart-check fmt unit demo demo-real bench bench-controller bench-webhook bench-jump-pod e2e-kwctl policy-e2e policy-e2e-run kwctl-wapc bats registry-given clean controlplane controlplane-check cluster-up real-node-deps real-node-images real-node-rootfs real-node-check

all: policy

# $(call apt-install,PACKAGES): Debian's PACKAGES installed as root (the package lists updated
# only when the install fails), or an error naming them; one shell statement.
apt-install = if [ "$$(id -u)" = 0 ]; then { apt-get install -y -qq $(1) || { apt-get update -qq && \
  apt-get install -y -qq $(1); }; } >/dev/null; else echo "run as root or install $(1) yourself" >&2; exit 1; fi
# The image's and the static binary's sources named by paths that are the same in every clone
# and on every machine, so that the same commit builds the same bytes.
REMAP_RUSTFLAGS = --remap-path-prefix=$${CARGO_HOME:-$$HOME/.cargo}=/cargo --remap-path-prefix=$(CURDIR)=/jumppod
# $(call count-tests,WHAT,LOG...): cargo's and node's test results in LOG added up, one line.
count-tests = cat $(2) 2>/dev/null | awk '/^test result:/ {p += $$4; f += $$6} /^\# pass / {p += $$3} \
  /^\# fail / {f += $$3} /^kwctl suite / {p += $$4; f += $$6} \
  END {printf "$(1): %d passed, %d failed\n", p, f}'

## setup: install the wasm32-wasip1 target, clippy and rustfmt when missing
setup:
	@rustup target list --installed | grep -qx '$(WASM_TARGET)' || rustup target add $(WASM_TARGET)
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy
	@rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt

## kubectl: the simulator's tests drive it (Debian's kubernetes-client) and need it installed
kubectl:
	@command -v kubectl >/dev/null 2>&1 || { \
	  echo "kubectl not found: installing Debian's kubernetes-client (the simulator's kubectl tests use it)"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq kubernetes-client >/dev/null; \
	  else echo "run as root or install kubectl yourself (apt-get install kubernetes-client)" >&2; exit 1; fi; }

## sshd: the jump pod's start script and the kit's hooks are tested under a real OpenSSH sshd
## (host/tests/sshd.rs, host/tests/kit.rs, in namespaces of their own: root, unshare, ip), from
## Debian's openssh-server; the kit's under busybox's shell and applets too (an alpine image's)
sshd:
	@{ test -x /usr/sbin/sshd && command -v ip >/dev/null 2>&1 && command -v busybox >/dev/null 2>&1; } || { \
	  echo "sshd, ip or busybox not found: installing Debian's openssh-server, iproute2 and busybox (host/tests/sshd.rs and kit.rs run a real sshd)"; \
	  $(call apt-install,openssh-server iproute2 busybox); }

## policy: build the Kubewarden policy (policy.wasm at the top of the repo)
policy: policy.wasm

# The tests load the build's own file ($(POLICY_WASM)): it is a target of its own, so that a
# target directory removed under an older policy.wasm is built again.
policy.wasm: $(POLICY_WASM)
	cp $(POLICY_WASM) $@
	@echo "policy.wasm: $$(wc -c < $@) bytes"

$(POLICY_WASM): $(POLICY_SRC) | setup
	$(CARGO) build -p jumppod-policy --target $(WASM_TARGET) --release

## annotated-policy.wasm: policy.wasm with metadata.yml and policy/README.md (needs kwctl)
annotated-policy.wasm: policy.wasm policy/metadata.yml policy/README.md
	@command -v kwctl >/dev/null 2>&1 || { echo "kwctl not found: it annotates the module (https://docs.kubewarden.io)" >&2; exit 1; }
	kwctl annotate -m policy/metadata.yml -u policy/README.md -o $@ policy.wasm

## accept-all: the bench's floor, a waPC guest that accepts without reading (tests/fixtures/accept-all)
accept-all: setup
	$(CARGO) build -p jumppod-accept-all --target $(WASM_TARGET) --release

## spin: a waPC guest whose validate never returns (tests/fixtures/spin), for the webhook's
## deadline test (host/tests/webhook.rs)
spin: setup
	$(CARGO) build -p jumppod-spin --target $(WASM_TARGET) --release

## no-wasm: the binary without the Wasm runtime (--no-default-features: the native gate only),
## which host/tests/cli.rs runs. In a target directory of its own: built in target/ it would
## take the place of target/debug/jumppod, the binary every other test runs, until the next
## default build; and its dependencies' features differ from the workspace's, so target/ would
## not have them built anyway. No wasmtime: a cold build takes a few minutes, then seconds.
no-wasm:
	$(CARGO) build -p jumppod-host --no-default-features --target-dir $(NO_WASM_DIR)

## lint: formatting, then clippy over every target of the workspace, warnings as errors. Clippy
## runs inside the test build (TEST_CARGO), so this builds every test binary too.
lint: setup docs-check fmt-check test-build

fmt-check:
	$(CARGO) fmt --all -- --check

## docs-check: the user docs carry no work notes (issue numbers, commit ids) and their links
## resolve (docs/check.sh); host/tests/docs.rs checks their commands against the binary
docs-check:
	bash docs/check.sh

## docs-reference: docs/reference/cli.md again, from the binary's clap definitions (a test
## fails while the committed page differs)
docs-reference:
	$(CARGO) build --workspace --features $(FEATURES) --bin jumppod
	$(TARGET_DIR)/debug/jumppod help-markdown > docs/reference/cli.md

## helm: built from its Go module (no prebuilt binary is downloaded), for the chart's lint,
## template and tests (host/tests/chart.rs reads its path from JUMPPOD_HELM)
## The default Kubernetes version of `helm template` and `helm lint` set as helm's own release
## build sets it (its Makefile: the minor of the client-go it is built with, 1.37 for 3.22);
## built without it, helm renders for Kubernetes 1.20.
HELM_KUBE_MINOR := 37
HELM_LDFLAGS := -s -w $(foreach pkg,lint/rules chartutil,-X helm.sh/helm/v3/pkg/$(pkg).k8sVersionMajor=1 \
  -X helm.sh/helm/v3/pkg/$(pkg).k8sVersionMinor=$(HELM_KUBE_MINOR))
$(HELM):
	GOBIN=$(TARGET_DIR)/tools CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice -n 10 \
		go install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

## chart-check: helm lint (strict) and helm template of charts/jumppod, with its defaults, every
## namespace and the webhook; host/tests/chart.rs compares what it renders with the binary's
chart-check: $(HELM)
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) --set watchAllNamespaces=true --set webhook.enabled=true
	$(HELM) template jumppod $(CHART) --namespace jumppod >/dev/null
	$(HELM) template jumppod $(CHART) --namespace jumppod --set watchAllNamespaces=true --set webhook.enabled=true >/dev/null

## test-build: every target of the workspace in the test profile, linted by clippy as it is
## compiled, the real-node test binaries too (`--all-targets` leaves out test targets with
## `test = false`, so they are named), without running any (the stages that run them then build
## nothing)
REAL_NODE_TESTS := --test real_node --test in_cluster --test dstack
test-build: setup
	$(TEST_CARGO) test --workspace --all-targets --features $(FEATURES) --no-run
	$(TEST_CARGO) test --workspace --features $(FEATURES) $(REAL_NODE_TESTS) --no-run

## unit: every test of the workspace, the host's against the simulator and against the real
## control plane (started once, around the whole run; tests/real_cluster.rs needs it), then
## one line that adds up every test binary's result. The policy Wasm, the spinning guest and
## the binary without Wasm are built first: the tests load and run them. Two lanes at once
## (.ci/test-lanes): the test binaries that use the control plane, one after another as cargo
## runs them (each one's tests share it with each other only), beside every other one.
UNIT_CLUSTER_TESTS := real_cluster,controller,keeper,surge,chart,demo
unit: policy spin no-wasm kubectl sshd $(CONTROLPLANE) $(HELM)
	$(CONTROLPLANE) run --dir $(TARGET_DIR)/controlplane/test -- \
	  .ci/test-lanes $(TARGET_DIR)/test.log cluster=$(UNIT_CLUSTER_TESTS) -- \
	  $(TEST_CARGO) test --workspace --features $(FEATURES) --no-fail-fast
	@$(call count-tests,tests,$(TARGET_DIR)/test.log)

## check: the contributors' fast tier, no root, no cluster: fmt, clippy, and the tests of the
## core, the policy (natively and through waPC), the planner, the review, the Wasm runtime and
## the simulator (everything `make test` runs but what needs a control plane, real nodes, root,
## kubectl, helm or a browser). Same features as `make test`: a warm target/ is shared.
CHECK_TESTS := --lib --bins --test import_cycles --test fixtures --test mutations \
  --test compilations --test pool --test policy_wasm --test policy_hostile --test policy_manifests \
  --test policy_properties --test admission --test api --test controllers --test faults \
  --test rbac --test scale --test scenarios --test docs
check: policy lint
	set -o pipefail; $(TEST_CARGO) test --workspace --features $(FEATURES) $(CHECK_TESTS) 2>&1 | tee $(TARGET_DIR)/check.log
	@$(call count-tests,tests,$(TARGET_DIR)/check.log)

## test: what CI runs. Four lanes at once (`test-lanes`): the cargo builds, one after another;
## beside them the control plane, its checks and the real-node check; the downloads (Debian's
## packages, the real nodes' root filesystem, dstack's virtual environment), which need little
## CPU, then helm and the binary without Wasm; and the suites that need no real node (unit,
## chart-check, the policy's kwctl suite, web-test) as soon as what they run is built. The
## builds are niced and the suites are not, so a suite waiting on its cluster leaves the cores
## to the builds, not the other way round. Then the real-node scenarios, alone on the machine:
## their timing and memory are what they measure. Each stage's lines carry its name; a table of
## the stages and their minutes ends the run, passed or not.
test:
	@rm -f $(STAGES)
	@rm -f $(TARGET_DIR)/test.log $(TARGET_DIR)/real-node.log $(TARGET_DIR)/web-test.log $(TARGET_DIR)/policy-e2e.log
	@$(MAKE) --no-print-directory test-stages; rc=$$?; $(STAGE) --summary; \
	  $(call count-tests,all tests (Rust and real nodes and web and kwctl),$(TARGET_DIR)/test.log $(TARGET_DIR)/real-node.log \
	  $(TARGET_DIR)/web-test.log $(TARGET_DIR)/policy-e2e.log); exit $$rc

test-stages:
	$(MAKE) --no-print-directory -j4 test-lanes
	$(STAGE) real-node-scenarios $(MAKE) --no-print-directory real-node-scenarios

# The four lanes. In each lane one stage at a time (`|`: order only); between the lanes only
# what one needs of the other. The builds' stages run at NICE, the suites' not. Cargo locks a
# profile's directory while it builds, not the whole target/: `unit` runs its (test-profile)
# binaries while the image's profile is built.
.PHONY: test-lanes ci-policy ci-test-build ci-image-bin ci-image-check ci-web ci-packages ci-helm \
  ci-controlplane ci-no-wasm ci-controlplane-check ci-real-node-rootfs ci-real-node-images ci-real-node-check \
  ci-dstack-venv ci-web-setup ci-npm ci-unit ci-chart-check ci-policy-e2e ci-web-test
test-lanes: ci-policy ci-test-build ci-image-bin ci-image-check ci-web \
  ci-packages ci-helm ci-controlplane ci-no-wasm ci-controlplane-check ci-real-node-rootfs \
  ci-real-node-images ci-real-node-check ci-dstack-venv ci-web-setup ci-npm \
  ci-unit ci-chart-check ci-policy-e2e ci-web-test
# The cargo lane.
ci-policy:
	$(STAGE) policy $(NICE) $(MAKE) --no-print-directory -j1 policy spin
# `make lint`: fmt, the docs check and the test build, clippy inside it.
ci-test-build: | ci-policy
	$(STAGE) lint+test-build $(NICE) $(MAKE) --no-print-directory -j1 lint
ci-image-bin: | ci-test-build
	$(STAGE) image-build $(NICE) $(MAKE) --no-print-directory -j1 image-bin
# The web's tools: rustup's target and a `cargo install`, a build of its own.
ci-web-setup: | ci-image-bin
	$(STAGE) web-setup $(NICE) $(MAKE) --no-print-directory -j1 web-setup
ci-image-check: | ci-web-setup ci-controlplane ci-packages
	$(STAGE) image-check $(MAKE) --no-print-directory -j1 image-check
ci-web: | ci-image-check
	$(STAGE) web-build $(NICE) $(MAKE) --no-print-directory -j1 web
# The control plane, its checks, then the real-node check (its nodes are the machine's: one run
# at a time). The longest lane of a machine with empty caches: it starts at once.
ci-controlplane:
	$(STAGE) controlplane $(NICE) $(MAKE) --no-print-directory -j1 controlplane
ci-controlplane-check: | ci-controlplane
	$(STAGE) controlplane-check $(NICE) $(MAKE) --no-print-directory -j1 controlplane-check
ci-real-node-images: | ci-controlplane-check ci-real-node-rootfs
	$(STAGE) real-node-images $(NICE) $(MAKE) --no-print-directory -j1 real-node-images
ci-real-node-check: | ci-real-node-images
	$(STAGE) real-node-check $(MAKE) --no-print-directory -j1 real-node-check
# The downloads (Debian's packages, the real nodes' root filesystem, dstack's virtual
# environment, the npm packages and Debian's chromium), then the builds the other lanes have no
# room for: helm, and the binary without Wasm (after the cargo lane's first stage: rustup would
# otherwise run twice at once).
ci-packages:
	$(STAGE) packages $(NICE) $(MAKE) --no-print-directory -j1 packages
ci-real-node-rootfs: | ci-packages
	$(STAGE) real-node-rootfs $(NICE) $(MAKE) --no-print-directory -j1 real-node-rootfs
ci-dstack-venv: | ci-real-node-rootfs
	$(STAGE) dstack-venv $(NICE) $(MAKE) --no-print-directory -j1 dstack-venv
ci-npm: | ci-dstack-venv
	$(STAGE) npm $(NICE) $(MAKE) --no-print-directory -j1 web/node_modules/.installed $(CHROMIUM)
ci-helm: | ci-npm
	$(STAGE) helm $(NICE) $(MAKE) --no-print-directory -j1 $(HELM)
ci-no-wasm: | ci-helm ci-policy
	$(STAGE) no-wasm $(NICE) $(MAKE) --no-print-directory -j1 no-wasm
# The suites that need no real node.
ci-unit: | ci-test-build ci-policy ci-no-wasm ci-controlplane ci-helm ci-packages
	$(STAGE) unit $(MAKE) --no-print-directory -j1 unit
ci-chart-check: | ci-unit
	$(STAGE) chart-check $(MAKE) --no-print-directory -j1 chart-check
# The kwctl suite: the policy and kwctl-wapc built (test-build), bats from the packages.
ci-policy-e2e: | ci-chart-check ci-test-build ci-policy ci-packages
	$(STAGE) policy-e2e $(MAKE) --no-print-directory -j1 policy-e2e-run
ci-web-test: | ci-policy-e2e ci-web ci-npm
	$(STAGE) web-test $(MAKE) --no-print-directory -j1 web-test

## packages: every Debian package `make test` installs, in one apt-get (each target that needs
## some still checks for its own)
TEST_PACKAGES = openssh-server iproute2 busybox bats jq $(REAL_NODE_PACKAGES) $(IMAGE_PACKAGES) chromium
packages:
	@missing=$$(for p in $(TEST_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if ! command -v kubectl >/dev/null 2>&1; then missing="$$missing kubernetes-client"; fi; \
	if [ -z "$$(echo $$missing)" ]; then echo "packages: all installed"; \
	else echo "installing Debian's" $$missing; $(call apt-install,$$missing); fi

## demo: the policy on example requests, then the host's upgrade story against the simulator
## (no Wasm runtime is built: the policy's code runs natively, as `jumppod ensure` runs it)
demo: setup
	@echo "building the demo (a fresh clone compiles for a few minutes; cargo shows its progress)"
	$(CARGO) run -p jumppod-e2e --bin demo

## demo-real: the same story against the real control plane (built from Go modules, started
## for the run, stopped after)
demo-real: setup $(CONTROLPLANE)
	rm -rf $(TARGET_DIR)/controlplane/demo
	$(CONTROLPLANE) run --dir $(TARGET_DIR)/controlplane/demo -- $(CARGO) run -p jumppod-e2e --bin demo

## bench: criterion benchmarks (policy through waPC, simulator, host)
bench: policy accept-all
	$(CARGO) bench --workspace

## bench-controller: `jumppod run`'s memory and start-up with 1, 100 and 1000 projects, on the
## real control plane (started for the run, stopped after)
bench-controller: setup $(CONTROLPLANE)
	rm -rf $(TARGET_DIR)/controlplane/bench
	$(CONTROLPLANE) run --dir $(TARGET_DIR)/controlplane/bench -- \
	  $(CARGO) bench -p jumppod-host --features real-cluster --bench controller

## bench-webhook: `jumppod webhook` (the image's binary, `make image-bin`) over TLS on 127.0.0.1,
## loaded by wrk (8 connections, 8 s per request) with an ordinary pod, a conforming jump pod, a
## bare legacy pod it mutates and dstack's jump pod it gives the kit: req/s, p50, p99, and its
## RSS at rest, while starting and after the load (host/bench/webhook.sh). wrk, jq, curl and openssl from Debian's packages.
BENCH_WEBHOOK_PACKAGES := wrk jq curl openssl
bench-webhook: policy image-bin
	@{ command -v wrk && command -v jq && command -v curl && command -v openssl; } >/dev/null 2>&1 || { \
	  echo "bench-webhook: installing Debian's $(BENCH_WEBHOOK_PACKAGES) (wrk loads the webhook)"; \
	  $(call apt-install,$(BENCH_WEBHOOK_PACKAGES)); }
	host/bench/webhook.sh $(IMAGE_BIN) $(POLICY_WASM)

## bench-jump-pod: the jump pod at its default size on a real node: its memory with 0, 10 and 40
## SSH sessions through it, the throughput of one, and how long new connections fail after its
## container crashes (host/bench/jump-pod.sh), in a control plane with 2 real nodes (root)
bench-jump-pod: real-node-deps real-node-images image-bin $(CONTROLPLANE)
	@command -v jq >/dev/null 2>&1 || { echo "bench-jump-pod: installing Debian's jq"; $(call apt-install,jq); }
	$(CONTROLPLANE) run --real-nodes 2 --real-node-images $(REAL_NODE_IMAGES) \
	  --dir $(TARGET_DIR)/controlplane/bench-jump-pod -- host/bench/jump-pod.sh $(IMAGE_BIN)

## bats: the policy's kwctl suite is a bats file, read with jq (Debian's bats and jq)
bats:
	@{ command -v bats && command -v jq; } >/dev/null 2>&1 || { \
	  echo "bats or jq not found: installing Debian's bats and jq (policy/e2e.bats)"; \
	  $(call apt-install,bats jq); }

## policy-e2e: the policy's kwctl suite (policy/e2e.bats: kwctl run, annotate and inspect on the
## fixtures) with kwctl where it is installed, else with kwctl-wapc, kwctl's command line on
## jumppod's waPC runtime; the first line says which ran. policy-e2e-run runs it with the
## kwctl-wapc that `make test-build` built.
policy-e2e: kwctl-wapc
	@$(MAKE) --no-print-directory policy-e2e-run
policy-e2e-run: policy bats
	set -o pipefail; policy/e2e.sh | tee $(TARGET_DIR)/policy-e2e.log

## e2e-kwctl: the same suite with the kwctl on PATH (docs/testing.md builds it from source), then
## kwctl-wapc's answers compared with kwctl's on every fixture (policy/runners.bats)
e2e-kwctl: policy bats kwctl-wapc
	policy/e2e.sh --runner kwctl

# kwctl-wapc with make test's features, so a warm target/ is shared.
kwctl-wapc:
	$(CARGO) build --workspace --features $(FEATURES) --bin kwctl-wapc

## controlplane: the real Kubernetes control plane for the tests, built from Kubernetes' Go
## modules (controlplane/README.md); rebuilt only when its sources change. Go's own caches
## (~/go/pkg/mod, ~/.cache/go-build) make a rebuild after the first one fast.
CONTROLPLANE_VERSION := v1.36.3
CONTROLPLANE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(CONTROLPLANE_VERSION) \
                        -X k8s.io/component-base/version.gitMajor=1 \
                        -X k8s.io/component-base/version.gitMinor=36
controlplane: $(CONTROLPLANE)

$(CONTROLPLANE): $(filter-out %_test.go,$(wildcard controlplane/*.go)) controlplane/go.mod controlplane/go.sum
	cd controlplane && CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice -n 10 \
		go build -ldflags '$(CONTROLPLANE_LDFLAGS)' -o $@ .

## The control plane's tests in one binary, the real-node ones too (tag `realnode`): it is the
## components as well (TestMain), so linking it is linking Kubernetes. controlplane-check runs
## all but the real-node tests, real-node-check those (as root), from the same binary; no debug
## information (-s -w), as in the build, which halves the link.
CONTROLPLANE_TEST := $(TARGET_DIR)/controlplane/controlplane.test
$(CONTROLPLANE_TEST): $(wildcard controlplane/*.go) controlplane/go.mod controlplane/go.sum
	cd controlplane && CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice -n 10 \
		go test -c -tags realnode -ldflags '-s -w' -o $@ .

## controlplane-check: gofmt, go vet and the Go tests of controlplane/ but the real nodes' (CGO
## off as in the build, so the build cache is shared)
controlplane-check: $(CONTROLPLANE_TEST)
	@test -z "$$(gofmt -l controlplane)" || { gofmt -l controlplane; echo "gofmt: files above need formatting"; exit 1; }
	cd controlplane && CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice -n 10 go vet -tags realnode ./...
	cd controlplane && nice -n 10 $(CONTROLPLANE_TEST) -test.skip '^TestRealNodes' -test.timeout 10m

## dstack-venv: dstack's own Python code, the release operators run, pinned with everything it
## pulls in (tests/dstack/requirements.txt), in a virtual environment of its own; the real-node
## scenarios drive dstack's Kubernetes backend through tests/dstack/driver.py in it
DSTACK_VENV := $(TARGET_DIR)/dstack-venv
export JUMPPOD_DSTACK_PYTHON := $(DSTACK_VENV)/bin/python
export JUMPPOD_DSTACK_DRIVER := $(CURDIR)/tests/dstack/driver.py
dstack-venv: $(DSTACK_VENV)/.installed
$(DSTACK_VENV)/.installed: tests/dstack/requirements.txt
	rm -rf $(DSTACK_VENV)
	python3 -m venv $(DSTACK_VENV)
	$(DSTACK_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r tests/dstack/requirements.txt
	$(JUMPPOD_DSTACK_PYTHON) $(JUMPPOD_DSTACK_DRIVER) check
	touch $@

## real-node-deps: what the real nodes run, from Debian's packages (root): containerd and runc,
## the CNI plugins, iptables and conntrack for kube-proxy, debootstrap for the jump pod's image
REAL_NODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack debootstrap iproute2 \
  docker-registry skopeo
real-node-deps:
	@{ test -x /usr/bin/containerd && test -x /usr/sbin/runc && test -x /usr/lib/cni/bridge && \
	   test -x /usr/sbin/iptables && test -x /usr/sbin/conntrack && test -x /usr/sbin/debootstrap && test -x /usr/sbin/ip && \
	   test -x /usr/bin/docker-registry && test -x /usr/bin/skopeo; } || { \
	  echo "real nodes: installing Debian's $(REAL_NODE_PACKAGES)"; \
	  $(call apt-install,$(REAL_NODE_PACKAGES)); }

## real-node-images: the pause and sshd images (controlplane/images/build.sh), built from this
## repository's files and Debian's packages, cached under target/images by their inputs
REAL_NODE_IMAGES := $(TARGET_DIR)/images
real-node-images: real-node-deps $(CONTROLPLANE)
	nice -n 10 controlplane/images/build.sh $(CONTROLPLANE) $(REAL_NODE_IMAGES)
# The sshd image's Debian root filesystem alone: downloads and unpacking, no control plane.
real-node-rootfs: real-node-deps
	nice -n 10 controlplane/images/build.sh --rootfs-only $(REAL_NODE_IMAGES)

## image: jumppod's OCI image, without Docker or any daemon (image/build.sh): the binary (profile
## `image`: release without LTO), policy.wasm, the libraries the binary loads, user 65532; packed
## by the control plane's `oci-archive`, reproducibly (the commit's time on every file). Paths are
## remapped so that a clone elsewhere builds the same bytes. IMAGE_REF names it.
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE_REF ?= ghcr.io/jumppod/jumppod:$(VERSION)
export JUMPPOD_IMAGE_REF := $(IMAGE_REF)
IMAGE_DIR := $(TARGET_DIR)/oci
IMAGE_BIN := $(TARGET_DIR)/image/jumppod
## image-bin: the image's binary alone (no control plane needed)
image-bin:
	RUSTFLAGS="$(REMAP_RUSTFLAGS)" \
	  nice -n 5 $(CARGO) build --profile image -p jumppod-host --locked
image: policy image-bin $(CONTROLPLANE)
	image/build.sh $(CONTROLPLANE) $(IMAGE_BIN) $(POLICY_WASM) $(IMAGE_DIR) $(IMAGE_REF)

## publish: push `make image`'s image and the chart to REGISTRY (host[/path], a registry of
## yours, required): REGISTRY/jumppod:VERSION and oci://REGISTRY/charts/jumppod, after `skopeo login`/
## `helm registry login` where the registry asks for it; PLAIN_HTTP=1 for a registry without TLS.
## target/publish/published.env names what was pushed. make real-node-scenarios runs the same
## script against a registry on loopback, from which the real nodes pull.
REGISTRY ?=
PUBLISH   = image/publish.sh $(1) $(IMAGE_DIR)/jumppod.oci.tar $(VERSION) $(CHART) $(HELM) $(TARGET_DIR)/publish $(2)
export JUMPPOD_PUBLISHED := $(TARGET_DIR)/publish/published.env
# Before minutes of building: a push needs a registry of the operator's.
registry-given:
	@test -n "$(REGISTRY)" || { echo "publish: REGISTRY is not set: name a registry of yours, host[/path] (make publish REGISTRY=registry.example.com/platform)" >&2; exit 2; }
publish: registry-given image $(HELM)
	@command -v skopeo >/dev/null 2>&1 || { echo "publish: installing Debian's skopeo"; $(call apt-install,skopeo); }
	$(call PUBLISH,$(REGISTRY),$(if $(PLAIN_HTTP),plain-http))

## dist: a static `jumppod` for Linux x86_64 (musl, optimised as the image's binary) and its
## SHA-256, in target/dist: for machines that run the CLI or the controller outside a cluster.
## The rustup target and Debian's musl-tools (musl-gcc, for ring's and zstd's C code) are
## installed when missing. The image keeps its glibc build: musl's allocator is slower under
## the webhook's load.
DIST_TARGET := x86_64-unknown-linux-musl
DIST_DIR    := $(TARGET_DIR)/dist
DIST_BIN    := $(DIST_DIR)/jumppod-$(VERSION)-x86_64-linux-musl
dist: setup
	@rustup target list --installed | grep -qx '$(DIST_TARGET)' || rustup target add $(DIST_TARGET)
	@command -v musl-gcc >/dev/null 2>&1 || { \
	  echo "dist: installing Debian's musl-tools (musl-gcc compiles ring's and zstd's C code)"; \
	  $(call apt-install,musl-tools); }
	RUSTFLAGS="$(REMAP_RUSTFLAGS)" \
	  nice -n 5 $(CARGO) build --profile image --target $(DIST_TARGET) -p jumppod-host --locked
	mkdir -p $(DIST_DIR)
	cp $(TARGET_DIR)/$(DIST_TARGET)/image/jumppod $(DIST_BIN)
	@# Static: no program interpreter (loader) and no shared library needed.
	@! readelf -ld $(DIST_BIN) | grep -E 'program interpreter|\(NEEDED\)' || { echo "dist: $(DIST_BIN) is not static" >&2; exit 1; }
	$(DIST_BIN) --version
	cd $(DIST_DIR) && sha256sum $(notdir $(DIST_BIN)) > $(notdir $(DIST_BIN)).sha256
	@echo "dist: $(DIST_BIN), $$(wc -c < $(DIST_BIN)) bytes, sha256 $$(cut -d' ' -f1 $(DIST_BIN).sha256)"

## image-check: the image built twice has one digest, its layer alone runs the binary, and it is
## pushed to a registry and pulled by digest (Debian's skopeo and docker-registry, on loopback)
IMAGE_PACKAGES := skopeo docker-registry
image-check: image
	@{ command -v skopeo && command -v docker-registry; } >/dev/null 2>&1 || { \
	  echo "image-check: installing Debian's $(IMAGE_PACKAGES)"; \
	  $(call apt-install,$(IMAGE_PACKAGES)); }
	image/check.sh $(CONTROLPLANE) $(IMAGE_BIN) $(POLICY_WASM) $(IMAGE_DIR) $(IMAGE_REF)

## real-node-check: the control plane with 2 real nodes (kubelet, containerd, kube-proxy), the
## jump pod's sshd reached through a NodePort on 127.0.0.1 (controlplane/realnode_test.go), run
## from the test binary itself: what it proves is outside the binary, so no cached pass counts
real-node-check: real-node-deps real-node-images $(CONTROLPLANE_TEST)
	cd controlplane && JUMPPOD_REAL_NODE_IMAGES=$(REAL_NODE_IMAGES) nice -n 10 \
	  $(CONTROLPLANE_TEST) -test.run '^TestRealNodes' -test.v -test.timeout 15m

## real-node-scenarios: the host's own scenarios on real nodes (host/tests/real_node.rs), and
## dstack 0.22.5's own code beside `jumppod webhook` (host/tests/dstack/): the
## ReplicaSet `ensure` creates, its pod's sshd reached by OpenSSH through the NodePort, evicted
## and reached again; the kubelet's own evictions under memory pressure; inside a control
## plane of its own with 2 real nodes, the second evicting for memory 2 GiB below what is
## free when it starts. The tests are built before it starts: a build's memory would press it.
## The workspace's features, as `unit`'s: nothing is built again after `make test-build`.
## Then the chart on the same nodes (host/tests/in_cluster.rs), as operators get it: a registry
## on loopback (Debian's docker-registry, `--registry`) to which `make publish`'s script pushes
## `make image`'s image and the chart; helm installs the chart from it and the nodes' containerd
## pulls the image by digest (the jump pods' sshd image too), nothing imported but the pause image.
REAL_NODE_TEST := $(TEST_CARGO) test --workspace --features $(FEATURES) $(REAL_NODE_TESTS)
## The real kubelets sync each pod every REAL_NODE_SYNC, the kubelet's default. The keys
## scenarios do not wait for it: a change of the keys annotates the running pods, and their
## kubelet syncs them at once. At 10s, one run in two refused one connection of the drain
## without the controller, never seen at 1m.
REAL_NODE_SYNC ?= 1m
real-node-scenarios: policy real-node-deps real-node-images sshd image dstack-venv $(HELM) $(CONTROLPLANE)
	$(REAL_NODE_TEST) --no-run
	set -o pipefail; nice -n 10 $(CONTROLPLANE) run --real-nodes 2 --pressure-headroom 2Gi --registry \
	  --kubelet-sync-frequency $(REAL_NODE_SYNC) --real-node-images $(REAL_NODE_IMAGES) --dir $(TARGET_DIR)/controlplane/real-node -- \
	  sh -c '$(call PUBLISH,"$$JUMPPOD_REGISTRY/jumppod",plain-http) && exec $(REAL_NODE_TEST) -- --nocapture' \
	  2>&1 | tee $(TARGET_DIR)/real-node.log

## cluster-up: the control plane in the foreground, files in target/controlplane/run (Ctrl-C stops it)
cluster-up: $(CONTROLPLANE)
	$(CONTROLPLANE) up --dir $(TARGET_DIR)/controlplane/run

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -f policy.wasm annotated-policy.wasm

# web, web-test, web-bench, playground: the core in JavaScript and the browser (web/web.mk)
include web/web.mk
