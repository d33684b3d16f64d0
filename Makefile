# gpuq — run `make` for the list of targets.
SHELL := /bin/bash
GO ?= go
SQLC_VERSION ?= v1.31.1
GOBIN ?= $(shell $(GO) env GOPATH)/bin
SQLC := $(GOBIN)/sqlc
BIN := bin/gpuq

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/gpuq
	$(GO) build -o $(BIN) ./cmd/gpuq

.PHONY: test
test: ## Run all tests (real PostgreSQL and embedded JetStream), the benchmark program's included
	$(GO) test -count=1 -timeout 20m ./...
	cd bench && $(GO) test -count=1 ./...

# The Python client is installed the way its README says, offline: Debian's
# python3 (with setuptools and wheel) in a virtualenv that sees the system
# packages, no build isolation, no package index.
PYTHON ?= /usr/bin/python3
PYVENV := .venv-python

.PHONY: test-python
test-python: build ## Install clients/python into a fresh virtualenv and run its tests against a real `gpuq dev`
	@command -v $(PYTHON) >/dev/null || (echo "test-python: $(PYTHON) not found; install Debian's python3, python3-venv, python3-setuptools and python3-wheel"; exit 1)
	rm -rf $(PYVENV) clients/python/build clients/python/gpuq.egg-info
	$(PYTHON) -m venv --system-site-packages $(PYVENV)
	$(PYVENV)/bin/python -m pip install --quiet --no-build-isolation --no-index --no-deps ./clients/python
	rm -rf clients/python/build clients/python/gpuq.egg-info
	cd clients/python/tests && GPUQ_BIN=$(CURDIR)/$(BIN) GPUQ_README=$(CURDIR)/README.md GPUQ_TEST_INSTALLED=1 \
		$(CURDIR)/$(PYVENV)/bin/python -m unittest -v

# FUZZTIME is a duration (30s) or a number of executions (3000x). CI uses a
# number: with a duration, Go 1.26's fuzzing coordinator can report its own
# deadline as a failure when it stops (go.dev/issue/75804).
FUZZTIME ?= 30s
FUZZ_TARGETS := ./queue/:FuzzParseSpec ./policy/:FuzzParseMoney ./cmd/gpuq/cli/:FuzzParseRules ./cmd/gpuq/cli/:FuzzParseOffers ./workers/:FuzzUnpack

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s, or a count such as 3000x); a crash is written to the package's testdata/fuzz, to keep as a test case
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($${t%%:*}) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

.PHONY: test/gpu
test/gpu: build ## Run `gpuq canary -o json` against this machine's NVIDIA driver (CANARY_FLAGS adds expectations)
	./$(BIN) canary -o json $(CANARY_FLAGS)

.PHONY: test/race
test/race: ## Run the control-plane and worker tests under the race detector (worker processes too)
	$(GO) test -race -count=1 -timeout 20m ./queue/... ./workers/... ./cmd/...

.PHONY: demo
demo: build ## Run the end-to-end demo on embedded NATS and a private PostgreSQL
	./$(BIN) demo

.PHONY: run
run: build ## Run `gpuq dev`: embedded NATS, private PostgreSQL, scheduler and local pools
	./$(BIN) dev

$(SQLC):
	$(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)

.PHONY: generate
generate: $(SQLC) ## Regenerate sql/db from sql/queries and the migrations, api/openapi.json from the HTTP API and deploy/{nats,compose}/auth.conf from gpuq's NATS roles
	$(SQLC) generate
	$(GO) run ./cmd/gpuq openapi > api/openapi.json
	$(GO) run ./cmd/gpuq nats-auth deploy/nats/roles.yaml > deploy/nats/auth.conf
	$(GO) run ./cmd/gpuq nats-auth deploy/compose/roles.yaml > deploy/compose/auth.conf

.PHONY: verify
verify: $(SQLC) ## Fail when generated code is stale, go.mod is untidy, a package imports against DESIGN.md's table, code is unformatted or vet complains (bench/ included)
	$(SQLC) diff
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	$(GO) test -count=1 ./internal/layering/
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

.PHONY: lint
lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

.PHONY: test-policy
test-policy: ## Run the placement policy, adapter and plan tests
	$(GO) test ./policy/... ./adapters/... && $(GO) test -run Plan ./cmd/gpuq/cli/

.PHONY: bench-policy
bench-policy: ## Benchmark Place over 10,000 offers and 50 rules, one-shot and on a prepared OfferSet
	$(GO) test -run '^$$' -bench BenchmarkPlace -benchmem ./policy/

.PHONY: bench-store
bench-store: ## Benchmark attempts (claim, heartbeat, success) in batches of 32 while 3,200 and 100,000 jobs are queued
	$(GO) test -run '^$$' -bench '^BenchmarkAttemptsWithJobsQueued$$' -benchtime 100x ./queue/store/

.PHONY: bench-events
bench-events: ## Benchmark announcing job events to the events stream: acknowledged, plain, and plain with the stream's async persist mode
	$(GO) test -run '^$$' -bench '^BenchmarkAnnounceEvents$$' -benchtime 100000x ./queue/

.PHONY: bench-http
bench-http: ## Benchmark HTTP submission (8 clients) and state change → SSE event latency
	$(GO) test -run '^$$' -bench . -benchtime 500x ./queue/control/httpapi/

BENCH_FLAGS ?=

.PHONY: bench
bench: build ## Benchmark gpuq side by side with River on embedded NATS and durable PostgreSQL (~20 min; BENCH_FLAGS adds flags)
	cd bench && $(GO) run . -gpuq ../$(BIN) -repo .. $(BENCH_FLAGS)

.PHONY: bench-quick
bench-quick: build ## The same benchmarks with small counts, one run each (about a minute)
	cd bench && $(GO) run . -gpuq ../$(BIN) -repo .. -jobs 3000 -process-jobs 200 -latency-jobs 500 -rate 100 -scale-jobs 5000 -trials 3 -runs 1 $(BENCH_FLAGS)

TRACES ?= ../shared/traces

.PHONY: sim-report
SIM_SWEEP = ./$(BIN) simulate --sweep --trace-dir $(TRACES)/availability-aws-2022-10-26 \
	--trace-dir $(TRACES)/preemption-aws-2023-04-22 --pool-glob '*_v100_1.json'

sim-report: build ## Sweep the spot strategies over $(TRACES) and write sim-report.md
	$(SIM_SWEEP) | tee sim-report.md

.PHONY: sim-heldout
sim-heldout: build ## The same sweep with every start shifted by 3 h (held-out jobs), into sim-heldout.md
	$(SIM_SWEEP) --sweep-start-offset-hours 3 | tee sim-heldout.md

.PHONY: sim-slack
sim-slack: build ## The same sweep with slack 20% and 40% of compute (held-out jobs), into sim-slack.md
	$(SIM_SWEEP) --sweep-slack 0.2,0.4 | tee sim-slack.md

# Moving a checkpoint between zones: 25 GB at 0.02 USD/GB of inter-zone
# transfer (0.01 out, 0.01 in) and about 3 minutes at 140 MB/s.
V100_ZONES = $(TRACES)/availability-aws-2022-10-26/us-west-2a_v100_1.json,$(TRACES)/availability-aws-2022-10-26/us-west-2b_v100_1.json
SIM_POOLS = ./$(BIN) simulate --sweep --move-cost 0.50 --move-hours 0.05 --pools $(V100_ZONES)

.PHONY: sim-pools
sim-pools: build ## Each V100 zone of availability-aws-2022-10-26 alone and both with moves, into sim-pools.md
	$(SIM_POOLS) | tee sim-pools.md

.PHONY: sim-pools-heldout
sim-pools-heldout: build ## The same with every start shifted by 3 h (held-out jobs), into sim-pools-heldout.md
	$(SIM_POOLS) --sweep-start-offset-hours 3 | tee sim-pools-heldout.md

# The same two zones as the zones of one region: a move copies the
# checkpoint into the next pool's bucket inside the region, with no egress,
# and the copy is taken to fit in the restart overhead.
SIM_POOLS_REGION = ./$(BIN) simulate --sweep --pools $(V100_ZONES)
SIM_CARDS_REGION = ./$(BIN) simulate --sweep --pools-by-card $(TRACES)/availability-aws-2022-10-26

.PHONY: sim-pools-region
sim-pools-region: build ## The two V100 zones with moves that cost only the restart (one region's storage), into sim-pools-region.md
	$(SIM_POOLS_REGION) | tee sim-pools-region.md

.PHONY: sim-pools-region-heldout
sim-pools-region-heldout: build ## The same with every start shifted by 3 h (held-out jobs), into sim-pools-region-heldout.md
	$(SIM_POOLS_REGION) --sweep-start-offset-hours 3 | tee sim-pools-region-heldout.md

.PHONY: sim-pools-region-cards
sim-pools-region-cards: build ## Every card of availability-aws-2022-10-26 found in two zones, moves costing only the restart, into sim-pools-region-cards.md
	$(SIM_CARDS_REGION) | tee sim-pools-region-cards.md

SIM_CARDS = $(SIM_CARDS_REGION) --move-cost 0.50 --move-hours 0.05

.PHONY: sim-pools-cards
sim-pools-cards: build ## The same comparison for every card of availability-aws-2022-10-26 found in two zones, into sim-pools-cards.md
	$(SIM_CARDS) | tee sim-pools-cards.md

.PHONY: sim-pools-cards-heldout
sim-pools-cards-heldout: build ## The same with every start shifted by 3 h (held-out jobs), into sim-pools-cards-heldout.md
	$(SIM_CARDS) --sweep-start-offset-hours 3 | tee sim-pools-cards-heldout.md
