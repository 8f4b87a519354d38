# The contract in JavaScript: the core built for wasm32-unknown-unknown through wasm-bindgen,
# the npm package (web/pkg), the playground page and their tests. Included by the Makefile;
# uses its CARGO and TARGET_DIR. Everything it needs is installed here when missing: the
# rustup target, wasm-bindgen-cli (the version of the wasm-bindgen crate in Cargo.lock, from
# crates.io into target/tools), the npm packages of the tests, Debian's chromium.

WEB_TARGET     := wasm32-unknown-unknown
WEB_WASM       := $(TARGET_DIR)/$(WEB_TARGET)/web/jumppod_web.wasm
WEB_OUT        := $(TARGET_DIR)/web/playground
WEB_TOOLS      := $(TARGET_DIR)/tools
WASM_BINDGEN   := $(WEB_TOOLS)/bin/wasm-bindgen
WASM_BINDGEN_VERSION := $(shell sed -n '/^name = "wasm-bindgen"$$/{n;s/^version = "\(.*\)"$$/\1/p;}' Cargo.lock)
PLAYGROUND_PORT ?= 8047
CHROMIUM       ?= /usr/bin/chromium

.PHONY: web web-setup web-test web-bench playground

## web-setup: the wasm32-unknown-unknown target and wasm-bindgen-cli at the crate's version
web-setup:
	@rustup target list --installed | grep -qx '$(WEB_TARGET)' || rustup target add $(WEB_TARGET)
	@if ! $(WASM_BINDGEN) --version 2>/dev/null | grep -qx 'wasm-bindgen $(WASM_BINDGEN_VERSION)'; then \
	  echo "installing wasm-bindgen-cli $(WASM_BINDGEN_VERSION) into $(WEB_TOOLS)"; \
	  $(CARGO) install --locked --root $(WEB_TOOLS) wasm-bindgen-cli --version '=$(WASM_BINDGEN_VERSION)' || { \
	    echo "the CLI's own Cargo.lock pins a version the registry does not serve: resolving its dependencies afresh"; \
	    $(CARGO) install --root $(WEB_TOOLS) wasm-bindgen-cli --version '=$(WASM_BINDGEN_VERSION)'; }; \
	fi

## web: the Wasm module, the npm package (node + bundler builds) and the playground in target/web/playground
web: web-setup
	$(CARGO) build -p jumppod-web --target $(WEB_TARGET) --profile web
	rm -rf web/pkg/node web/pkg/bundler $(WEB_OUT)
	$(WASM_BINDGEN) --target nodejs --out-dir web/pkg/node $(WEB_WASM)
	$(WASM_BINDGEN) --target bundler --out-dir web/pkg/bundler $(WEB_WASM)
	mkdir -p $(WEB_OUT)
	cp web/playground/*.html web/playground/*.js web/playground/*.css $(WEB_OUT)/
	$(WASM_BINDGEN) --target web --out-dir $(WEB_OUT)/pkg $(WEB_WASM)
	@raw=$$(wc -c < $(WEB_OUT)/pkg/jumppod_web_bg.wasm); gz=$$(gzip -9 -c $(WEB_OUT)/pkg/jumppod_web_bg.wasm | wc -c); \
	  printf '{"wasmBytes": %d, "wasmGzipBytes": %d, "wasmBindgen": "%s"}\n' $$raw $$gz '$(WASM_BINDGEN_VERSION)' > $(WEB_OUT)/build.json; \
	  echo "jumppod_web_bg.wasm: $$raw bytes, $$gz gzip -9"

# The tests' npm packages (playwright-core, typescript, the package itself), from the lockfile.
web/node_modules/.installed: web/package.json web/package-lock.json web/pkg/package.json
	cd web && npm ci --no-audit --no-fund
	touch $@

# playwright-core drives Debian's chromium: Playwright's own browser downloads are not used.
$(CHROMIUM):
	apt-get update && apt-get install -y chromium

## web-test: the npm package against the Kubewarden module (Node), the playground in Chromium
web-test: web policy web/node_modules/.installed $(CHROMIUM)
	@# The oracle is target/debug/jumppod as `make unit` builds it (the same features: no rebuild).
	$(TEST_CARGO) test --workspace --features $(FEATURES) --no-run
	set -o pipefail; cd web && JUMPPOD_POLICY_WASM=$(POLICY_WASM) CHROMIUM=$(CHROMIUM) node --test --test-concurrency=1 \
	  test/api.test.mjs test/agreement.test.mjs test/playground.test.mjs 2>&1 | tee $(TARGET_DIR)/web-test.log

## web-bench: review latency in Node (first and steady) for a conforming jump pod and an ordinary pod
web-bench: web web/node_modules/.installed
	cd web && node bench/latency.mjs

## playground: serve the playground on http://127.0.0.1:$(PLAYGROUND_PORT)/ until Ctrl-C
playground: web
	@echo "playground: http://127.0.0.1:$(PLAYGROUND_PORT)/"
	python3 -m http.server --bind 127.0.0.1 --directory $(WEB_OUT) $(PLAYGROUND_PORT)
