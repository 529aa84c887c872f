package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// intoTopology refuses a direct publish (no delay) into the delay topology's own objects: an
// exchange of the topology that is not a target, or, through the default exchange, a queue of
// the topology or a delay queue of another prefix (delayspec.Names.OwnsQueue,
// delayspec.IsDelayQueueName) by the routing key or a CC or BCC key. Stays: such a message
// lacks the headers that route it on, and RabbitMQ's at-least-once dead-lettering keeps it;
// once a queue holds more of them than the dead-letter worker's prefetch
// (dead_letter_worker_consumer_prefetch, 32) every delayed message behind them stalls. The
// parking queue stays open (the consumer package parks messages there). A direct reply-to
// address ("amq.rabbitmq.reply-to.") through the default exchange is refused too: RabbitMQ
// closes the whole connection over one it cannot decode. The error wraps ErrInvalidInput.
func (p *Publisher) intoTopology(exchange, routingKey string, headers amqp.Table) error {
	const directReplyTo = "amq.rabbitmq.reply-to." // https://www.rabbitmq.com/docs/direct-reply-to
	if exchange != "" {
		if _, target := p.targets[exchange]; !target && p.names.OwnsExchange(exchange) {
			return fmt.Errorf("%w: exchange %q belongs to the delay topology, and a message published there by hand "+
				"lacks the headers that route it on, so it can stall the delay queues for everyone: publish to a target "+
				"exchange (%s), with a delay for a delayed message", ErrInvalidInput, exchange, p.targetList())
		}
		return nil
	}
	for _, k := range directKeys(routingKey, headers) {
		if strings.HasPrefix(k, directReplyTo) {
			return fmt.Errorf("%w: routing key %q through the default exchange is a direct reply-to address: RabbitMQ "+
				"decodes it as a channel's process id and closes the whole connection (541 INTERNAL_ERROR) when it is not "+
				"one of a running channel, failing every publish in flight with it; the Publisher sends no direct "+
				"reply-to (reply with amqp091-go on a channel of your own)", ErrInvalidInput, k)
		}
		if p.names.OwnsQueue(k) || delayspec.IsDelayQueueName(k) {
			return fmt.Errorf("%w: routing key %q through the default exchange names a queue of the delay topology; "+
				"a message put there by hand lacks the headers that route it on, and holds up every delayed message behind it: "+
				"publish to a target exchange (%s), with a delay for a delayed message", ErrInvalidInput, k, p.targetList())
		}
	}
	return nil
}

// intoForeignTopology refuses a direct publish (no delay) into the topology of another prefix
// in the vhost, as intoTopology does for the Publisher's own: to an exchange that is not one of
// the Publisher's targets, or through the default exchange by a routing key, CC or BCC key,
// that is one of another prefix's objects (delayspec.ForeignPrefixes; its delay queues are
// refused by their names' shape in intoTopology) when that prefix has a topology
// (hasTopology). Its entry exchanges lead straight into its delay queues, where a message
// without the Publisher's headers stalls every delayed message behind it; its dispatch
// exchange routes to its targets on a header, past the user's permissions on them (RabbitMQ
// checks the exchange published to, not those an exchange-to-exchange binding leads to); its
// revocation stream would take forged revocations. The error wraps ErrInvalidInput.
func (p *Publisher) intoForeignTopology(ctx context.Context, exchange, routingKey string, headers amqp.Table) error {
	names := []string{exchange}
	if exchange == "" {
		names = directKeys(routingKey, headers)
	} else if _, target := p.targets[exchange]; target {
		return nil
	}
	for _, name := range names {
		for _, prefix := range delayspec.ForeignPrefixes(name, p.names.Prefix, exchange == "", false) {
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

// topologyMemory is how long the Publisher keeps the answer to whether another prefix has a
// topology: a topology declared or torn down meanwhile is seen after at most this long.
const topologyMemory = 10 * time.Second

// topologyAnswers are the answers of hasTopology, by prefix, each kept for topologyMemory (at
// most maxNames of them).
type topologyAnswers struct {
	mu sync.Mutex
	m  map[string]topologyAnswer
}

type topologyAnswer struct {
	has   bool
	until time.Time
}

func (a *topologyAnswers) get(prefix string) (has, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ans, ok := a.m[prefix]
	if !ok || time.Now().After(ans.until) {
		return false, false
	}
	return ans.has, true
}

func (a *topologyAnswers) set(prefix string, has bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil || len(a.m) >= maxNames {
		a.m = make(map[string]topologyAnswer) // forget them all rather than grow without bound
	}
	a.m[prefix] = topologyAnswer{has: has, until: time.Now().Add(topologyMemory)}
}

func (a *topologyAnswers) clear() {
	a.mu.Lock()
	a.m = nil
	a.mu.Unlock()
}

// hasTopology reports whether the topology of prefix exists in the vhost: whether its parking
// queue does (a passive declare on the check channel). Every topology has one, and
// delayspec.Names.OwnsQueue never counts it, so an exchange of the user's that merely has the
// shape of another prefix's object (say "shop.dispatch") does not count as that prefix's
// topology by its own existence. An answer is kept for topologyMemory (and forgotten at a
// reconnection). A check the broker refuses for another reason than 404 counts as no
// topology, and is not kept (the publish goes ahead, and meets the broker's own refusal).
func (p *Publisher) hasTopology(ctx context.Context, prefix string) (bool, error) {
	for {
		if has, ok := p.refusals.topologies.get(prefix); ok {
			return has, nil
		}
		parking := delayspec.Names{Prefix: prefix}.Parking()
		asked := false // set before the answer is sent back: read after it
		answer, err := p.askOnCheckChannel(ctx, fmt.Sprintf("check whether prefix %q has a delay topology", prefix),
			func() bool { _, ok := p.refusals.topologies.get(prefix); return ok },
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
			p.refusals.topologies.set(prefix, true)
			return true, nil
		case answer.lost:
			continue // the connection went during the check: check again on the next one
		case errors.As(answer.err, &ae) && ae.Code == amqp.NotFound:
			p.refusals.topologies.set(prefix, false)
			return false, nil
		default:
			p.log.Debug().Str("prefix", prefix).Err(answer.err).Msg("amqpdelay: could not check for another prefix's topology; publishing")
			return false, nil
		}
	}
}
