# Chaperone — build, test, lint, demo, generate.
GO       ?= go
BIN      ?= bin/chaperone
NODE_E2E := cmd/chaperone/testdata/node

.PHONY: build test test-deps lint demo generate fuzz bench clean

build:
	$(GO) build -o $(BIN) ./cmd/chaperone

# The whole suite: lint, then every test with the race detector. The
# end-to-end tests run real curl, python3, node and git as the agent.
test: lint test-deps
	$(GO) test -race -count=1 -timeout 25m ./...

# The Node end-to-end client needs undici (fetch honours HTTPS_PROXY only
# through it); installed from the lock file when npm is present.
test-deps:
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix $(NODE_E2E) --no-audit --no-fund --silent; \
	else echo "npm not found: the Node end-to-end test will skip"; fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=windows $(GO) build ./...

demo: build
	$(BIN) demo

# Regenerates committed generated code (none yet; the eBPF programs will
# be built here with bpf2go). CI fails if regenerating changes anything.
generate:
	$(GO) generate ./...

# A short run of every fuzz target (the seed corpora run in `make test`).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./proxy ./certs

clean:
	rm -rf bin
