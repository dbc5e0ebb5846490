# Switchyard: build, run and test entry points.
# `make test` is the test command the README gives and CI (.ci/run) calls.

GO ?= go

# The binary; keep in step with "output" in xcaddy.json.
BIN := bin/switchyard
CONFIG ?= Caddyfile.example

# What the binary is made from: every Go file, the module files and the build
# manifest. The binary is rebuilt only when one of them is newer than it;
# `make -B build` forces a rebuild (a deleted file is not noticed, for one).
FIND_GO := find . \( -name .git -o -path ./bin -o -name node_modules \) -prune -o
BUILD_INPUTS := $(shell $(FIND_GO) \( -name '*.go' -o -name go.mod -o -name go.sum \) -type f -print) xcaddy.json

.PHONY: build run test fuzz bench fmt-check clean

build: $(BIN)

# go build leaves an up-to-date binary untouched, so touch it to record the
# time of this successful build for the next make.
$(BIN): $(BUILD_INPUTS)
	$(GO) run ./internal/buildtool
	@touch $@

run: build
	./$(BIN) run --config $(CONFIG) --adapter caddyfile

# The real-client tests in integration/ run the npm packages pinned by its lock file,
# which need Node 22 or newer. scripts/node.sh prints the directory of a node and npm
# that will do: the ones on PATH when new enough, or else a pinned Node it installs once
# from the npm registry (checksums pinned) into ~/.cache/switchyard; it fails, saying why,
# when it can do neither. That directory goes first on PATH for npm and the tests, and
# npm ci runs when node_modules is missing or older than the lock file.
test:
	@set -e; \
	node_bin=$$(scripts/node.sh); \
	PATH="$$node_bin:$$PATH"; export PATH; \
	echo "node $$(node --version) at $$(command -v node), npm $$(npm --version)"; \
	stamp=integration/node_modules/.package-lock.json; \
	if [ ! -e $$stamp ] || [ integration/package-lock.json -nt $$stamp ] || [ integration/package.json -nt $$stamp ]; then \
		echo "npm ci --prefix integration"; \
		npm ci --prefix integration --no-audit --no-fund --prefer-offline; \
	fi; \
	echo "$(GO) vet ./..."; $(GO) vet ./...; \
	echo "$(GO) test -race -count=1 -timeout 20m ./..."; $(GO) test -race -count=1 -timeout 20m ./...; \
	echo "$(GO) test -tags purego -count=1 ./protocols/  (the scanner without its assembly)"; \
	$(GO) test -tags purego -count=1 ./protocols/

# The fuzz targets (docs/benchmarks.md "Fuzzing"): each runs for FUZZTIME; CI uses the default, a
# count of inputs rather than a duration (5 to 30 s each here): Go 1.26's fuzz
# coordinator can fail a target with a spurious "context deadline exceeded" as a
# duration ends (go.dev/issue/75804, fixed in Go 1.27), and a count sets no deadline.
# make fuzz FUZZTIME=10m runs them longer. New crashers land in testdata/fuzz/ of their
# package and are then replayed by every plain go test.
FUZZTIME ?= 500000x
FUZZ_TARGETS := FuzzParseRequest FuzzScanInPieces FuzzEventStream FuzzChatChunk FuzzChatChunkAfterAnother FuzzMessagesEvent FuzzResponsesEvent FuzzEventObjectCheck FuzzAppendJSONString FuzzJSONSplice FuzzScrubber FuzzUpstreamHeaders FuzzInputEstimate FuzzPDFPages

fuzz:
	@for target in $(FUZZ_TARGETS); do \
		echo "go test -run '^$$' -fuzz '^$$target\$$' -fuzztime $(FUZZTIME) ./protocols/"; \
		$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) ./protocols/ || exit 1; \
	done

# The load benchmark (bench/, docs/benchmarks.md "Load benchmark"): Switchyard against a stock Caddy
# reverse_proxy of the same Caddy version and the upstream itself, all on 127.0.0.1.
# About five minutes (limits off, and on in memory and in a throwaway redis-server when
# there is one); prints the tables and writes bench/results/latest.json.
# Extra flags: make bench BENCH_FLAGS='-quick' (a check that it runs), '-pprof DIR'.
STOCK_BIN := bin/caddy-stock
BENCH_BIN := bin/switchyard-bench
BENCH_FLAGS ?=

bench: $(BIN) $(STOCK_BIN)
	$(GO) build -o $(BENCH_BIN) ./bench
	./$(BENCH_BIN) -switchyard $(BIN) -stock $(STOCK_BIN) -out bench/results/latest.json $(BENCH_FLAGS)

# Caddy with no plugins, built once and again only when its manifest changes.
$(STOCK_BIN): bench/stock-caddy.json
	$(GO) run ./internal/buildtool -manifest bench/stock-caddy.json
	@touch $@

# Lists unformatted Go files (testdata excluded) and fails if there are any.
fmt-check:
	@files=$$($(FIND_GO) -name testdata -prune -o -name '*.go' -type f -print0 | xargs -0 -r gofmt -l); \
	if [ -n "$$files" ]; then \
		echo "These files need gofmt (run: gofmt -w <file>):"; echo "$$files"; exit 1; \
	fi; \
	echo "gofmt: all Go files formatted"

clean:
	rm -rf bin
