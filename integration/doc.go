// Package integration holds the tests and benchmarks that run against a real RabbitMQ: the
// topology declared by the declare CLI, the amqpdelay Publisher's paths, and the benchmarks that
// compare them with raw amqp091-go publishing and with the delayed-message plugin.
//
// `make test` and `make bench` start a broker with scripts/broker and point AMQP_URL at it; see
// package brokertest for where the broker comes from otherwise. Every test works in its own
// vhost, so the tests run in parallel and leave nothing behind.
package integration
