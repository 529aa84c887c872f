package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/topology"
)

// foreignPrefixes returns the prefixes other than own under which name is one of a topology's
// own objects (topology.Names.Reserved: the dispatch, bucket, ladder, entry, last-hop, retry and
// plugin exchanges, the revocation stream, ...), the parking queue excepted: a vhost may hold the
// topologies of several prefixes, and a name like "billing.ladder.00.01.entry" could be one of
// prefix "billing"'s.
func foreignPrefixes(name, own string) []string {
	var out []string
	for i := strings.IndexByte(name, '.'); i > 0; {
		prefix := name[:i]
		n := topology.Names{Prefix: prefix}
		if prefix != own && n.Reserved(name) && name != n.Parking() {
			out = append(out, prefix)
		}
		j := strings.IndexByte(name[i+1:], '.')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return out
}

// intoForeignTopology refuses a direct publish (no delay) into the topology of another prefix
// in the vhost, as intoTopology does for the Publisher's own: to an exchange that is not one of
// the Publisher's targets, or through the default exchange by a routing key, CC or BCC key,
// whose name is one of another prefix's objects (foreignPrefixes) when that prefix's parking
// queue exists. Its entry exchanges lead straight into its delay queues, where a message
// without the Publisher's headers stalls every delayed message behind it; its dispatch
// exchange routes to its targets on a header, past the user's permissions on them (RabbitMQ
// checks the exchange published to, not those an exchange-to-exchange binding leads to); its
// revocation stream would take forged revocations. Whether a prefix has a topology is asked once
// per connection (hasTopology). The error wraps ErrInvalidInput.
func (p *Publisher) intoForeignTopology(ctx context.Context, exchange, routingKey string, headers amqp.Table) error {
	names := []string{exchange}
	if exchange == "" {
		names = directKeys(routingKey, headers)
	} else if _, target := p.targets[exchange]; target {
		return nil
	}
	for _, name := range names {
		for _, prefix := range foreignPrefixes(name, p.names.Prefix) {
			has, err := p.hasTopology(ctx, prefix)
			if err != nil {
				return err
			}
			if has {
				what := fmt.Sprintf("exchange %q", name)
				if exchange == "" {
					what = fmt.Sprintf("routing key %q through the default exchange", name)
				}
				return fmt.Errorf("%w: %s names an object of the delay topology of prefix %q in this vhost, which only its "+
					"own Publishers' delay paths may write to: a message put there by hand lacks the headers that route it "+
					"on (it can stall that topology's delay queues for everyone, or reach its targets past their "+
					"permissions); publish to one of this Publisher's targets (%s), or with a Publisher of prefix %q",
					ErrInvalidInput, what, prefix, p.targetList(), prefix)
			}
		}
	}
	return nil
}

// directKeys returns the routing keys of a publish: its routing key and those of its CC and
// BCC headers.
func directKeys(routingKey string, headers amqp.Table) []string {
	keys := []string{routingKey}
	for _, h := range []string{"CC", "BCC"} {
		if list, ok := headers[h].([]any); ok {
			for _, k := range list {
				if k, ok := k.(string); ok {
					keys = append(keys, k)
				}
			}
		}
	}
	return keys
}

// hasTopology reports whether the topology of prefix exists in the vhost: whether its parking
// queue does (a passive declare on the check channel). Every topology has one, and it is the
// one object of a topology that foreignPrefixes never asks about, so an exchange of the user's
// that merely has the shape of another prefix's object (say "shop.dispatch") does not count as
// that prefix's topology by its own existence. The answer is kept for the connection
// (refusals.forget). A check the broker refuses for another reason than 404 counts as no
// topology (the publish goes ahead, as checkExchange lets it).
func (p *Publisher) hasTopology(ctx context.Context, prefix string) (bool, error) {
	for {
		switch {
		case p.refusals.topologies.has(prefix):
			return true, nil
		case p.refusals.noTopologies.has(prefix):
			return false, nil
		}
		parking := topology.Names{Prefix: prefix}.Parking()
		asked := false // set before the answer is sent back: read after it
		answer, err := p.askOnCheckChannel(ctx, fmt.Sprintf("check whether prefix %q has a delay topology", prefix),
			func() bool { return p.refusals.topologies.has(prefix) || p.refusals.noTopologies.has(prefix) },
			func(ch *amqp.Channel) error {
				asked = true
				_, err := ch.QueueDeclarePassive(parking, true, false, false, false, nil)
				return err
			})
		if err != nil {
			return false, err
		}
		var ae *amqp.Error
		switch {
		case !asked && answer.err == nil: // skipped: another publish's check answered meanwhile
			continue
		case answer.err == nil:
			p.refusals.topologies.add(prefix)
			return true, nil
		case answer.lost:
			continue // the connection went during the check: check again on the next one
		case errors.As(answer.err, &ae) && ae.Code == amqp.NotFound:
			p.refusals.noTopologies.add(prefix)
			return false, nil
		default:
			p.log.Debug().Str("prefix", prefix).Err(answer.err).Msg("amqpdelay: could not check for another prefix's topology; publishing")
			return false, nil
		}
	}
}
