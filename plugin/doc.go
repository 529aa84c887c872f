// Package plugin holds what rabbitdelay needs to know about RabbitMQ's community
// delayed-message plugin (rabbitmq_delayed_message_exchange): its exchange type, its x-delay
// header and that header's limits, and how to find out, without disturbing anything else,
// whether a broker has the plugin and whether the topology's plugin exchange exists.
//
// # Design
//
// The plugin adds the exchange type "x-delayed-message". A message published to such an
// exchange with an integer header x-delay (milliseconds) is held by the plugin and routed, as
// the exchange's x-delayed-type would route it, once the delay has passed. rabbitdelay
// declares one such exchange per topology (topology.Names.PluginExchange, x-delayed-type
// headers) and binds it to the dispatch exchange, which routes the message to its target.
//
// The amqpdelay Publisher uses this package for the plugin path: [Delay] turns a
// time.Duration into the x-delay value (an int64, rounded up to whole milliseconds, never
// early), [SetDelay] writes it, and [ExchangeExists] tells at start and after each reconnect
// whether the plugin path can be used.
//
// # Limits
//
//   - x-delay must be an integer with 0 < x-delay <= 2^32-1 ms ([MaxDelay], about 49.7 days).
//     Anything else (a string, a float, 0, a negative or larger value) makes the plugin route the
//     message at once, silently; [Delay] refuses such values instead.
//   - amqp091-go sends a Go int in a Table as a signed 32-bit integer, so 30 days
//     (2,592,000,000 ms) would wrap negative and the message would be routed at once: the
//     value is always an int64.
//   - Published with the mandatory flag, a delayed message is answered with basic.return
//     NO_ROUTE although the plugin holds it: publish to the plugin exchange without mandatory.
//   - The plugin keeps one copy of each delayed message on the node that received it (lost if
//     that node is lost), and its README warns against hundreds of thousands of pending
//     messages. Its repository was archived in January 2026; its last release targets
//     RabbitMQ 4.2 and it cannot run on 4.3+.
//   - The plugin delivers a message with its x-delay header still present (the sign and width
//     of the value vary by version): a consumer that re-publishes a delivery must not let that
//     stale value decide the new delay (ttlbuckets.IsDelayHeader lists it among the headers a
//     publisher strips).
//
// # Probing
//
// Declaring an exchange of an unknown type fails. On RabbitMQ 3.x the answer is 503
// COMMAND_INVALID "unknown exchange type", a connection-level error that closes the whole
// connection, every channel on it included (seen on 3.10.8); from 4.0 it is 406
// PRECONDITION_FAILED "unknown exchange type" on the channel (seen on 4.0.5).
// [IsUnknownExchangeType] recognises both. [Probe] and [ExchangeExists] therefore always work
// on a connection of their own, which they close; [Probe] is the one probe rabbitdelay has
// (topology.ProbePlugin and the Publisher use it).
//
// # Sources
//
//   - The plugin's README: https://github.com/rabbitmq/rabbitmq-delayed-message-exchange
//     (x-delay in ms, x-delayed-type, the single-node copy, the scale warning, the archive note).
//   - The 2^32-1 ms ceiling, NO_ROUTE on mandatory publishes, the stale x-delay on delivery and
//     the connection-closing 503 on 3.x: observed on RabbitMQ 3.10.8; the channel's 406 on 4.x:
//     observed on 4.0.5 (TestProbePluginWithoutPlugin runs on both).
//   - AMQP 0-9-1 field types and amqp091-go's encoding of Go int as a signed 32-bit value:
//     https://www.rabbitmq.com/docs/amqp-0-9-1-reference and amqp091-go's types.go.
package plugin
