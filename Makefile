# Chaperone — build, test, lint, demo, generate.
GO       ?= go
BIN      ?= bin/chaperone
NODE_E2E := cmd/chaperone/testdata/node
AGENTS_E2E := cmd/chaperone/testdata/agents

.PHONY: build test test-deps lint demo generate generate-check fuzz bench clean

build:
	$(GO) build -o $(BIN) ./cmd/chaperone

# The whole suite: lint, then every test with the race detector. The
# end-to-end tests run real curl, python3, node and git as the agent.
# Then the proxy's tests again without it: its sockets' system calls are
# raw only in a build without the detector (proxy/internal/netx/sysconn_race.go).
test: lint test-deps
	$(GO) test -race -count=1 -timeout 25m ./...
	$(GO) test -count=1 -timeout 10m ./proxy

# The Node end-to-end client needs undici (fetch honours HTTPS_PROXY only
# through it), and TestRealAgents the real agent CLIs (Claude Code, Codex,
# Gemini CLI) at pinned versions; both installed from their lock files when
# npm is present. The agents (about 900 MB) are installed again only when
# their lock file changed; a failed install fails the target, and their
# suite skips only when the registry cannot be reached.
test-deps:
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix $(NODE_E2E) --no-audit --no-fund --silent; \
		if [ $(AGENTS_E2E)/node_modules/.package-lock.json -nt $(AGENTS_E2E)/package-lock.json ]; then :; \
		elif npm ping --silent >/dev/null 2>&1; then \
			npm ci --prefix $(AGENTS_E2E) --no-audit --no-fund --silent; \
		else echo "the npm registry cannot be reached: TestRealAgents will skip"; fi; \
	else echo "npm not found: the Node end-to-end tests will skip"; fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=windows $(GO) build ./...

demo: build
	$(BIN) demo

# Regenerates committed generated code: the eBPF programs (bpf2go, which
# needs clang, llvm-strip and libbpf's headers; installed from Debian when
# missing). A normal build needs none of them: the output is committed.
generate:
	@if ! command -v clang >/dev/null 2>&1 || ! command -v llvm-strip >/dev/null 2>&1 || [ ! -e /usr/include/bpf/bpf_helpers.h ]; then \
		echo "installing clang, llvm and libbpf-dev"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang llvm libbpf-dev; \
	fi
	$(GO) generate ./...

# Fails when the committed generated code is not what `make generate`
# produces from the sources.
generate-check: generate
	@git diff --exit-code --stat -- '*.go' '*.o' || { echo "generated code is stale: run make generate and commit"; exit 1; }

# Every fuzz target, one `go test -fuzz` run each, found automatically
# (scripts/fuzz.sh); the seed corpora (f.Add and testdata/fuzz/) also run in
# `make test`. fuzz-ci is CI's short pass; a failing input is printed with
# its path and contents.
.PHONY: fuzz fuzz-ci soak
FUZZTIME ?= 60s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash scripts/fuzz.sh

fuzz-ci:
	FUZZTIME=3s FUZZMINIMIZETIME=10s GO=$(GO) bash scripts/fuzz.sh

# SOAK_CLIENTS concurrent HTTPS clients for SOAK_DURATION in one transparent
# session (root), on loopback: every request answered right, and no
# goroutine, descriptor, redirect map entry or memory left behind.
SOAK_DURATION ?= 10m
SOAK_CLIENTS  ?= 1000
soak: build
	$(GO) build -o bin/soak ./bench/soak
	SOAK_DURATION=$(SOAK_DURATION) SOAK_CLIENTS=$(SOAK_CLIENTS) bin/soak -chaperone $(BIN)

# The Go micro-benchmarks, after bench-proxies (below): among them
# BenchmarkRedactCorpus, the proxy's redaction beside gitleaks on the same
# agent traffic (bench-redact runs it alone).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./proxy/... ./certs ./policy ./rewrite/...

# Redaction throughput on the secret corpus (internal/secretcorpus): the
# whole path (decode the JSON, walk, detect, replace) and gitleaks'
# DetectString on the same bodies, side by side; issue 26 wants >= 20x.
.PHONY: bench-redact
bench-redact:
	$(GO) test -run '^$$' -bench RedactCorpus -benchmem ./rewrite

clean:
	rm -rf bin

# The bypass suite: one transparent session whose agent tries every way
# around the policy it knows (docs/security.md). Needs root, cgroup v2 and
# eBPF; skips, saying why, without them.
.PHONY: bypass
bypass:
	$(GO) test -race -count=1 -run 'Bypass' ./cmd/chaperone/

# Side-by-side proxy benchmarks (docs/performance.md): direct, a relay that
# only copies bytes, a minimal TLS-intercepting proxy in Go (the TLS floor),
# Chaperone in proxy and transparent mode, a bare goproxy, mitmproxy and
# Squid ssl-bump, all on loopback;
# installs the peers from Debian when missing and stops them afterwards.
# `make bench` runs them before the Go micro-benchmarks above. Results go to
# bench/results/. BENCHFLAGS=-quick for a short run.
.PHONY: bench-proxies
bench-proxies:
	$(GO) run ./bench/cmd/bench $(BENCHFLAGS)
bench: bench-proxies
