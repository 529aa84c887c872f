# rabbitdelay: every target that needs a broker starts one with scripts/broker (AMQP_URL wins,
# then a Docker engine, then Debian's rabbitmq-server) and stops what it started, even on failure.
GO ?= go
BROKER := scripts/broker run --
FUZZTIME ?= 100000x
BENCH ?= .
BENCHTIME ?= 1x

.PHONY: test unit vet fuzz bench demo build broker-up broker-down

## test: vet, race-enabled tests of every package against a real broker, short fuzz runs
test:
	$(BROKER) $(MAKE) --no-print-directory vet unit fuzz

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# Go's -fuzztime with a duration can end in a spurious "context deadline exceeded" on go1.26
# (golang/go#75804); a fixed count of executions is reliable.
fuzz:
	$(GO) test ./ttlbuckets -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME)
	$(GO) test ./ttlbuckets -run '^$$' -fuzz '^FuzzHeaders$$' -fuzztime $(FUZZTIME)

## demo: a broker, `declare apply` of a demo topology, then examples/ordertimeout (10,000 orders)
demo:
	$(BROKER) scripts/demo $(DEMOARGS)

## bench: the benchmarks of ./integration against a real broker (see README, Benchmarks)
bench:
	$(BROKER) $(GO) test ./integration -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -timeout 60m $(BENCHARGS)

build:
	$(GO) build ./...

broker-up:
	scripts/broker up

broker-down:
	scripts/broker down
