// Package integration holds the tests and benchmarks that run against a real RabbitMQ: the
// topology declared by the rabbitdelay CLI, the amqpdelay Publisher's paths, and the benchmarks that
// compare them with raw amqp091-go publishing and with the delayed-message plugin.
//
// The tests build with the integration tag; the benchmarks (bench_*_test.go, consumer_bench_test.go)
// only with the bench tag as well (`go test -tags integration,bench`, `make bench`).
// `make test` and `make bench` start a broker with scripts/broker and point AMQP_URL at it; see
// package brokertest for where the broker comes from otherwise. Every test works in its own
// vhost, so the tests run in parallel and leave nothing behind.
//
// No test asserts a timing: the machine running them may be busy (`make test` passes with a load
// average of 20 and more on 2 cores). A deadline in a test only bounds a hang, generously
// (maxLateness: a delivery more than 30 s late is stuck, not slow); checks on time are about
// order and never-early. How late, how fast and how long are benchmark figures
// (b.ReportMetric, with a baseline measured in the same run).
package integration
