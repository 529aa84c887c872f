package amqpdelay

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// intoTopology refuses a direct publish into the topology's own objects: an exchange that is
// not a target, or through the default exchange (routing, CC or BCC key) a queue of the
// topology or any prefix's delay queue. Stays: without the routing headers such messages stall
// every delayed message behind them once they outnumber the dead-letter worker's prefetch (32).
// A direct reply-to key is refused too: RabbitMQ closes the connection over one it cannot
// decode. The error wraps ErrInvalidInput.
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

// intoForeignTopology refuses, as intoTopology does, a direct publish into an object of
// another prefix that has a topology in the vhost: it would stall its delay queues, reach its
// targets past their permissions, or forge revocations. The error wraps ErrInvalidInput.
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

const topologyMemory = 10 * time.Second // how long an answer of hasTopology is kept

// topologyAnswers are hasTopology's answers by prefix, at most maxNames.
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
		a.m = make(map[string]topologyAnswer) // forget all rather than grow without bound
	}
	a.m[prefix] = topologyAnswer{has: has, until: time.Now().Add(topologyMemory)}
}

func (a *topologyAnswers) clear() {
	a.mu.Lock()
	a.m = nil
	a.mu.Unlock()
}

// hasTopology reports whether prefix has a topology in the vhost: whether its parking queue
// exists (which no user object merely shaped like one is). Another refusal than 404 counts as
// none and is not kept: the publish meets the broker's own refusal.
func (p *Publisher) hasTopology(ctx context.Context, prefix string) (bool, error) {
	for {
		if has, ok := p.refusals.topologies.get(prefix); ok {
			return has, nil
		}
		parking := delayspec.Names{Prefix: prefix}.Parking()
		asked := false
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
		switch {
		case !asked && answer.err == nil: // skipped: another check answered meanwhile
			continue
		case answer.err == nil:
			p.refusals.topologies.set(prefix, true)
			return true, nil
		case answer.lost:
			continue
		case amqpconn.IsNotFound(answer.err):
			p.refusals.topologies.set(prefix, false)
			return false, nil
		default:
			p.cfg.Logger.Debug().Str("prefix", prefix).Err(answer.err).Msg("amqpdelay: could not check for another prefix's topology; publishing")
			return false, nil
		}
	}
}
