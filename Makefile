# modelserve — `make run` starts it, `make test` checks it.
#
# `make test` prepares what it needs on a fresh machine of this kind: Node.js
# for real llama.cpp (the npm package node-llama-cpp, pinned in
# internal/llamatest), then vets and runs every Go test with the race detector.

GO      ?= go
BIN     := bin/modelserve
ADDR    ?= 127.0.0.1:8080
DATA    ?= ./data
LLAMATEST := internal/llamatest
TEMPL   := github.com/a-h/templ/cmd/templ@v0.3.1100

.PHONY: build run test vet unit e2e deps bench generate templ-check clean

build:
	$(GO) build -o $(BIN) ./cmd/modelserve

run: build
	mkdir -p $(DATA)
	./$(BIN) serve --addr $(ADDR) --data $(DATA)

test: deps templ-check vet unit e2e

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

# e2e drives the console in Debian's Chromium against the real binary.
# prepare.sh installs Chromium when it is missing and the playwright driver
# (npm playwright-core, pinned) outside the tree, and prints where.
e2e: deps
	eval "$$(./e2e/prepare.sh)" && $(GO) test -tags e2e -count=1 -timeout 15m ./e2e/

# deps installs what the tests run against. Each step is skipped when its
# result is already there, so a second run costs nothing.
deps: $(LLAMATEST)/node_modules/.installed

$(LLAMATEST)/node_modules/.installed: $(LLAMATEST)/package.json $(LLAMATEST)/package-lock.json
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || \
		{ echo "installing Node.js for the llama.cpp tests"; apt-get update && apt-get install -y nodejs npm; }
	npm ci --prefix $(LLAMATEST) --no-audit --no-fund
	touch $@

# bench prints each benchmark beside the baseline it is measured against in
# the same run; see the ratios, not the absolute times.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./...

# generate writes views/*_templ.go from the templ components; the output
# is committed, so building needs no templ.
generate:
	$(GO) run $(TEMPL) generate -path views

# templ-check fails when the committed views/*_templ.go are not what the
# .templ files generate: a component edited without make generate.
templ-check:
	@tmp=$$(mktemp -d) && cp -r views $$tmp/ && $(GO) run $(TEMPL) generate -path $$tmp/views >/dev/null && \
	diff -r -q views $$tmp/views >/dev/null || { echo "views/*_templ.go are stale: run make generate"; rm -rf $$tmp; exit 1; }; rm -rf $$tmp

clean:
	rm -rf bin
