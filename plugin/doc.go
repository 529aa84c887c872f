// Package plugin holds what rabbitdelay needs to know about RabbitMQ's community
// delayed-message plugin (rabbitmq_delayed_message_exchange): its exchange type, its x-delay
// header and that header's limits, and how to find out, on a connection of its own, whether a
// broker has the plugin and whether the topology's plugin exchange exists.
//
// The plugin adds the exchange type "x-delayed-message". A message published to such an
// exchange with an integer header x-delay (milliseconds) is held by the plugin and routed, as
// the exchange's x-delayed-type would route it, once the delay has passed. rabbitdelay
// declares one such exchange per topology and binds it to the dispatch exchange. [Delay]
// turns a time.Duration into the x-delay value, [SetDelay] writes it, and [ExchangeExists]
// tells whether the plugin path can be used.
//
// # Limits
//
//   - x-delay must be an integer with 0 < x-delay <= 2^32-1 ms ([MaxDelay]). Anything else
//     makes the plugin route the message at once, silently; [Delay] refuses such values.
//   - The value is always an int64: amqp091-go sends a Go int in a Table as a signed 32-bit
//     integer, which wraps negative above about 24.8 days.
//   - A delayed message published with the mandatory flag is returned NO_ROUTE although the
//     plugin holds it: publish to the plugin exchange without mandatory.
//   - The plugin keeps one copy of each delayed message, on the node that received it.
//   - The plugin's last release supports RabbitMQ up to 4.2; it cannot run on RabbitMQ 4.3
//     and later ([ErrUnsupported]).
//   - A delivery keeps its x-delay header: a consumer that re-publishes it must strip it
//     (the amqpdelay Publisher strips it from a message it delays).
//
// # Probing
//
// Declaring an exchange of an unknown type fails, in a way that depends on the RabbitMQ
// version ([IsUnknownExchangeType]); on RabbitMQ 3.x it closes the whole connection. [Probe]
// and [ExchangeExists] therefore work on a connection of their own, which they close.
//
// # Sources
//
//   - The plugin's README: https://github.com/rabbitmq/rabbitmq-delayed-message-exchange
//     (x-delay in ms, x-delayed-type, the single-node copy, supported RabbitMQ versions).
//   - The refusal of an unknown exchange type: rabbit_exchange.erl, check_type.
//   - AMQP 0-9-1 field types: https://www.rabbitmq.com/docs/amqp-0-9-1-reference, and
//     amqp091-go's types.go for its encoding of a Go int.
package plugin
