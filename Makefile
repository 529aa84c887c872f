# rabbitdelay: every target that needs a broker starts one with scripts/broker (AMQP_URL wins,
# then a Docker engine, then a private node of Debian's rabbitmq-server) and stops what it started,
# even on failure. BROKER_VERSION=3|4.0|4.3 picks the private node's RabbitMQ (3.10, 4.0 or 4.3, see
# scripts/broker); `make demo BROKER_VERSION=4.3` passes it on.
GO ?= go
BROKER := scripts/broker run --
# The consumer package's RedisStore tests need a Redis: scripts/redis starts a private one (REDIS_URL wins).
REDIS := scripts/redis run --
# The RabbitMQ versions `make test` runs the Go tests against, one broker each (BROKER_VERSION values
# of scripts/broker: 3 is 3.10, 4.0, 4.3). `make test TEST_VERSIONS="3 4.0 4.3"` adds 4.0.
TEST_VERSIONS ?= 3 4.3
FUZZTIME ?= 100000x
BENCH ?= .
BENCHTIME ?= 1x

.PHONY: test unit vet fuzz bench demo build broker-up broker-down cluster-test cluster-phase soak

## test: vet and short fuzz runs once, then for each version in TEST_VERSIONS two phases: the
## race-enabled tests of every package against a real single broker, then the cluster phase (the
## tests that need a cluster, see cluster-test) against a private 3-node cluster. With AMQP_URL set,
## the first phase runs once against that broker and the cluster phase is not run (it needs nodes it
## can kill: `make cluster-test`). Every phase runs even when an earlier one fails; the summary
## names the failed ones.
test: vet fuzz
	@if [ -n "$$AMQP_URL" ]; then \
		echo "== make test: Go tests against the broker of AMQP_URL (TEST_VERSIONS not used; no cluster phase: make cluster-test)"; \
		$(BROKER) $(MAKE) --no-print-directory unit; \
	else \
		failed=""; \
		for v in $(TEST_VERSIONS); do \
			echo "== make test: Go tests against RabbitMQ $$v (BROKER_VERSION=$$v)"; \
			BROKER_VERSION=$$v $(BROKER) $(MAKE) --no-print-directory unit || failed="$$failed $$v"; \
			echo "== make test: cluster phase against a $(CLUSTER_NODES)-node RabbitMQ $$v cluster (BROKER_VERSION=$$v)"; \
			start=$$(date +%s); \
			BROKER_VERSION=$$v $(MAKE) --no-print-directory cluster-phase || failed="$$failed $$v-cluster"; \
			echo "== make test: cluster phase of RabbitMQ $$v took $$(( $$(date +%s) - start )) s"; \
		done; \
		if [ -n "$$failed" ]; then echo "== make test: FAILED against RabbitMQ$$failed"; exit 1; fi; \
		echo "== make test: passed against RabbitMQ $(TEST_VERSIONS) (single node and $(CLUSTER_NODES)-node cluster)"; \
	fi

# The tests that need a broker (integration/ and the CLI's, cmd/declare) build only with the
# integration tag: a plain `go test ./...` needs no broker and starts none. The benchmarks of
# integration/ also need the bench tag, so the correctness tests compile and run without them.
TAGS := -tags integration
BENCH_TAGS := -tags integration,bench

vet:
	$(GO) vet ./...
	$(GO) vet $(TAGS) ./...
	$(GO) vet $(BENCH_TAGS) ./...

# -timeout bounds a hang, not a duration: on a busy 2-core machine the integration package
# takes several times as long as on an idle one. Most integration tests wait on the broker (message
# TTLs, node restarts), each in a vhost of its own: TEST_PARALLEL of them run at once (go test's
# default is GOMAXPROCS; with 4 on 2 cores the CPU is busy for most of the run).
TEST_PARALLEL ?= 4
unit:
	@if [ -n "$$RABBITMQ_VERSION" ]; then echo "== go test: the broker runs RabbitMQ $$RABBITMQ_VERSION"; fi
	$(REDIS) $(GO) test $(TAGS) -race -count=1 -timeout 60m -parallel $(TEST_PARALLEL) ./...

# Go's -fuzztime with a duration can end in a spurious "context deadline exceeded" on go1.26
# (golang/go#75804); a fixed count of executions is reliable.
fuzz:
	$(GO) test ./ttlbuckets -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/route -run '^$$' -fuzz '^FuzzRoute$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/route -run '^$$' -fuzz '^FuzzHeaders$$' -fuzztime $(FUZZTIME)

## demo: `rabbitdelay apply` of a demo topology, then demo/ordertimeout (10,000 orders), on the
## broker `scripts/broker up` recorded, or else on one started for the demo (see scripts/demo)
demo:
	@scripts/demo $(DEMOARGS)

## bench: the benchmarks of ./integration (build tags integration and bench) against a real
## broker (docs/benchmarks.md)
bench:
	$(BROKER) $(GO) test $(BENCH_TAGS) ./integration -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -timeout 60m $(BENCHARGS)

build:
	$(GO) build ./...

broker-up:
	scripts/broker up

broker-down:
	scripts/broker down

## cluster-test: the tests that need a cluster (CLUSTER_TESTS: integration's TestCluster*, without
## the soak, which is `make soak`) against a private cluster of CLUSTER_NODES (default 3) nodes
## (scripts/broker with BROKER_NODES, in the state directory CLUSTER_STATE) of each version in
## TEST_VERSIONS; like `test`, every version runs even when an earlier one fails. AMQP_URL is not
## used: the tests kill and restart nodes, which only a cluster started here allows.
## scripts/broker run stops the nodes when the tests end, fail or are interrupted.
## RABBITDELAY_CLUSTER_TESTS=1 makes a test that finds no cluster fail instead of skipping.
CLUSTER_NODES ?= 3
CLUSTER_STATE ?= $(CURDIR)/.broker-cluster
CLUSTER_TESTS ?= ^TestCluster
CLUSTER_SKIP ?= ^TestClusterSoak
cluster-test:
	@failed=""; \
	for v in $(TEST_VERSIONS); do \
		echo "== make cluster-test: $(CLUSTER_TESTS) against a $(CLUSTER_NODES)-node RabbitMQ $$v cluster (BROKER_VERSION=$$v)"; \
		BROKER_VERSION=$$v $(MAKE) --no-print-directory cluster-phase || failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "== make cluster-test: FAILED against RabbitMQ$$failed"; exit 1; fi; \
	echo "== make cluster-test: passed against RabbitMQ $(TEST_VERSIONS)"

# cluster-phase: the cluster tests against one cluster of BROKER_VERSION (used by test and
# cluster-test).
cluster-phase:
	env -u AMQP_URL -u AMQP_MANAGEMENT_URL -u AMQP_URLS -u AMQP_PLUGIN_URL \
		BROKER_STATE=$(CLUSTER_STATE) BROKER_NODES=$(CLUSTER_NODES) RABBITDELAY_CLUSTER_TESTS=1 \
		$(BROKER) $(GO) test $(TAGS) -race -count=1 -timeout 30m -v -run '$(CLUSTER_TESTS)' -skip '$(CLUSTER_SKIP)' ./integration/

## soak: TestClusterSoak (integration/cluster_soak_test.go) against a private 3-node cluster of each
## version in TEST_VERSIONS: node kills (the Publisher's node, the node leading the most delay queues,
## the consumer's node, one kept down, then repeated kills) while delayed messages flow, with every
## message accounted for (lost, early, duplicates, lateness). About 25 minutes per version. Knobs:
## SOAK_FAULTS, SOAK_MESSAGES, SOAK_RATE, SOAK_KILLS, SOAK_STALL_WAIT, SOAK_REPORT (see the test).
soak:
	@failed=""; \
	for v in $(TEST_VERSIONS); do \
		echo "== make soak: TestClusterSoak against a 3-node RabbitMQ $$v cluster (BROKER_VERSION=$$v)"; \
		env -u AMQP_URL -u AMQP_MANAGEMENT_URL -u AMQP_URLS -u AMQP_PLUGIN_URL BROKER_VERSION=$$v BROKER_NODES=3 \
			BROKER_STATE=$(CLUSTER_STATE) RABBITDELAY_CLUSTER_TESTS=1 \
			$(BROKER) $(GO) test $(TAGS) -count=1 -timeout 90m -v -run 'TestClusterSoak' ./integration/ -args -soak || failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "== make soak: FAILED against RabbitMQ$$failed"; exit 1; fi; \
	echo "== make soak: passed against RabbitMQ $(TEST_VERSIONS)"
