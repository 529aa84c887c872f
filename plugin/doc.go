// Package plugin holds what a program needs that publishes to RabbitMQ's community
// delayed-message plugin (rabbitmq_delayed_message_exchange): its exchange type and arguments,
// its x-delay header and that header's limits, and the RabbitMQ versions that cannot load it.
//
// A message published to an exchange of type "x-delayed-message" with an integer header
// x-delay (ms) is held by the plugin and routed, as the exchange's x-delayed-type would route
// it, once the delay has passed. rabbitdelay declares one such exchange per topology, bound to
// the dispatch exchange. [Delay] turns a time.Duration into the x-delay value, [SetDelay]
// writes it.
//
// # Limits
//
//   - x-delay must be an integer with 0 < x-delay <= 2^32-1 ms ([MaxDelay]); the plugin routes
//     anything else at once, silently. [Delay] refuses such values.
//   - A delayed message published with the mandatory flag is returned NO_ROUTE although the
//     plugin holds it: publish to the plugin exchange without mandatory.
//   - The plugin keeps one copy of each delayed message, on the node that received it.
//   - Its last release supports RabbitMQ up to 4.2 ([ErrUnsupported]).
//   - A delivery keeps its x-delay header: a consumer that re-publishes it must strip it (the
//     amqpdelay Publisher strips it from a message it delays).
//   - Without the plugin, declaring an exchange of type [ExchangeType] fails: on RabbitMQ 3.x
//     with 503 COMMAND_INVALID, which closes the whole connection; from 4.0 with 406
//     PRECONDITION_FAILED, which closes the channel. Declare or probe on a connection of its own.
//
// # Sources
//
//   - The plugin's README: https://github.com/rabbitmq/rabbitmq-delayed-message-exchange
//     (x-delay in ms, x-delayed-type, the single-node copy, supported RabbitMQ versions).
//   - The refusal of an unknown exchange type: rabbit_exchange.erl, check_type.
//   - AMQP 0-9-1 field types: https://www.rabbitmq.com/docs/amqp-0-9-1-reference, and
//     amqp091-go's types.go, which sends a Go int as a signed 32-bit integer ([SetDelay]).
package plugin
