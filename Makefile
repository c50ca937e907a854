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

.PHONY: build run test vet unit deps bench generate clean

build:
	$(GO) build -o $(BIN) ./cmd/modelserve

run: build
	mkdir -p $(DATA)
	./$(BIN) serve --addr $(ADDR) --data $(DATA)

test: deps vet unit

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

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

generate:
	@echo "nothing to generate yet"

clean:
	rm -rf bin
