# modelserve — `make run` starts it, `make test` checks it.
#
# `make test` prepares what it needs on a fresh machine of this kind: llama.cpp's
# llama-server (Debian sid's build, unpacked into a cache folder outside the
# tree by internal/engine/install-llama-server.sh), then vets and runs every
# Go test with the race detector, and the browser tests.

GO      ?= go
BIN     := bin/modelserve
ADDR    ?= 127.0.0.1:8080
DATA    ?= ./data
INSTALL_ENGINE := internal/engine/install-llama-server.sh
INSTALL_KUBE   := internal/kubetest/install.sh
INSTALL_JAEGER := internal/trace/jaegertest/install.sh
TEMPL   := github.com/a-h/templ/cmd/templ@v0.3.1100

.PHONY: build run test vet unit fuzz e2e deps kube jaeger bench generate templ-check clean

build:
	$(GO) build -o $(BIN) ./cmd/modelserve

# run uses the operator's llama-server when MODELSERVE_LLAMA_SERVER names one
# or one is on PATH, else installs the tests' build (once) and modelserve
# finds it there by itself.
run: build
	@[ -n "$$MODELSERVE_LLAMA_SERVER" ] || command -v llama-server >/dev/null || ./$(INSTALL_ENGINE) >/dev/null
	mkdir -p $(DATA)
	./$(BIN) serve --addr $(ADDR) --data $(DATA)

test: deps templ-check vet unit fuzz e2e

vet:
	$(GO) vet ./...

# Under make test a test that needs the engine fails when it is missing;
# a bare go test skips it and says why. The command's package runs whole
# servers with real engines under the race detector, two packages at a
# time on two cores: it takes most of go test's default ten minutes, so
# its bound is twenty.
unit: deps kube jaeger
	MODELSERVE_REQUIRE_ENGINE=1 MODELSERVE_REQUIRE_KUBE=1 MODELSERVE_REQUIRE_JAEGER=1 $(GO) test -race -count=1 -timeout 20m ./...

# fuzz runs each fuzz target of what parses untrusted input for a bounded
# number of inputs, beyond the seeds go test runs as cases. A count, not a
# time: with -fuzztime 5s, an input still running when the time was up
# failed the run with "context deadline exceeded". A corpus entry that
# found a bug is kept under the package's testdata/fuzz and runs in unit.
FUZZ := ./internal/gguf:FuzzReadRanges ./internal/plan:FuzzSize ./internal/plan:FuzzParseModelConfig ./internal/evals:FuzzParse ./internal/evals:FuzzJudge ./internal/gateway:FuzzMembers ./internal/redact:FuzzRedact
FUZZTIME ?= 2000x
fuzz:
	@for t in $(FUZZ); do \
		$(GO) test -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) $${t%%:*} || exit 1; \
	done

# e2e drives the console in Debian's Chromium against the real binary.
# prepare.sh installs Chromium when it is missing and the playwright driver
# (npm playwright-core, pinned) outside the tree, and prints where.
e2e: deps
	eval "$$(./e2e/prepare.sh)" && $(GO) test -tags e2e -count=1 -timeout 15m ./e2e/

# deps installs what the tests run against: llama-server. The script
# returns at once when the engine is already there, so a second run costs
# nothing.
deps:
	@./$(INSTALL_ENGINE) >/dev/null

# kube builds the control plane the kubernetes fleet is tested against
# (kube-apiserver, controller-manager, scheduler, etcd, kwok) from the Go
# module proxy into a cache folder outside the tree; the tests start it.
# The first build takes minutes; a second run costs nothing.
#
# busybox runs the init container's fetch script in its test and in every
# pod the behaviour suite (internal/fleetsuite) runs, as the fetch image
# does: Debian's package, installed when missing.
kube:
	@./$(INSTALL_KUBE) >/dev/null
	@command -v busybox >/dev/null || { [ "$$(id -u)" = 0 ] || { echo "busybox is missing: apt-get install -y busybox (as root)"; exit 1; }; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox >/dev/null; }

# jaeger builds the trace backend the tracing is tested against (Jaeger's
# all-in-one v2 binary, in-memory storage) from the Go module proxy into a
# cache folder outside the tree; the tests start it on loopback ports. The
# first build takes minutes; a second run costs nothing.
jaeger:
	@./$(INSTALL_JAEGER) >/dev/null

# bench prints each benchmark beside the baseline it is measured against in
# the same run; see the ratios, not the absolute times. The timeout is the
# whole of a package's benchmarks: cmd/modelserve's, with the real engine,
# take several minutes together. Among them, BenchmarkSIGHUPUnderLoad
# prints the longest request through each of three handovers beside the
# longest of as long a while without one, and reports the median added.
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./...

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
