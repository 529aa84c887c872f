package topology

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// delayQueueShape matches the names of the delay queues of a topology of any prefix: ladder and
// last-hop queues of every copy, bucket queues ([Names.LadderQueueCopy],
// [Names.LadderLastHopQueueCopy], [Names.BucketQueue]).
var delayQueueShape = regexp.MustCompile(`\.(ladder\.[0-9]{2}\.[0-9]{2}(\.s[0-9]+)?(\.last)?|bucket\.[0-9]+ms)$`)

// IsDelayQueueName reports whether name has the shape of a delay queue of any prefix's topology
// (a vhost may hold the topologies of several prefixes).
func IsDelayQueueName(name string) bool { return delayQueueShape.MatchString(name) }

// OwnsExchange reports whether name is one of the exchanges of n's topology that only its
// Publishers' delay paths write to: the names [Names.Reserved] holds, less those of queues (the
// parking queue, the revocation stream, the delay queues), which an exchange of the user's may
// carry: queues and exchanges are named apart.
func (n Names) OwnsExchange(name string) bool {
	return n.Reserved(name) && name != n.Parking() && name != n.Revoked() && !IsDelayQueueName(name)
}

// OwnsQueue reports whether name is one of the queues of n's topology that only its Publishers'
// delay paths write to: the revocation stream and the delay queues (ladder, last-hop and bucket
// queues). The parking queue is not one (the consumer package parks messages there through the
// default exchange).
func (n Names) OwnsQueue(name string) bool {
	bucket := strings.TrimSuffix(n.LadderPrefix(), "ladder.") + "bucket."
	return name == n.Revoked() || (strings.HasPrefix(name, n.LadderPrefix()) || strings.HasPrefix(name, bucket)) && IsDelayQueueName(name)
}

// ForeignPrefixes returns the prefixes other than own under which name is one of a topology's
// own objects: an exchange ([Names.OwnsExchange]), or, with queue, a queue ([Names.OwnsQueue]),
// the parking queue too when parking is set. A name like "billing.ladder.00.01.entry" could be
// prefix "billing"'s; whether that topology exists is [HasTopology]'s to say.
func ForeignPrefixes(name, own string, queue, parking bool) []string {
	var out []string
	for i := strings.IndexByte(name, '.'); i > 0; {
		prefix := name[:i]
		n := Names{Prefix: prefix}
		var owned bool
		switch {
		case !queue:
			owned = n.OwnsExchange(name)
		default:
			owned = n.OwnsQueue(name) || parking && name == n.Parking()
		}
		if prefix != own && owned {
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

// foreignObjects returns an error wrapping ErrInvalidSpec when a target, a ready queue's exchange
// or a ready queue of p is an object of another prefix's topology that exists in the vhost
// (ForeignPrefixes, then a passive declare of that prefix's parking queue): binding it into this
// topology would send this topology's messages into the other's delay queues, parking queue or
// exchanges.
func foreignObjects(ctx context.Context, conn *amqp.Connection, p *Plan) error {
	type candidate struct{ what, name, prefix string }
	var cands []candidate
	own := p.Names.Prefix
	for _, t := range p.Spec.Targets {
		for _, prefix := range ForeignPrefixes(t.Name, own, false, false) {
			cands = append(cands, candidate{"target exchange", t.Name, prefix})
		}
	}
	for _, r := range p.Spec.ReadyQueues {
		for _, prefix := range ForeignPrefixes(r.Exchange, own, false, false) {
			cands = append(cands, candidate{"ready queue's exchange", r.Exchange, prefix})
		}
		for _, prefix := range ForeignPrefixes(r.Queue, own, true, true) {
			cands = append(cands, candidate{"ready queue", r.Queue, prefix})
		}
	}
	if len(cands) == 0 {
		return nil
	}
	jobs := make([]job, len(cands))
	for i, c := range cands {
		parking := Names{Prefix: c.prefix}.Parking()
		jobs[i] = func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(parking, true, false, false, false, nil)
			return err
		}
	}
	errs, err := runJobs(ctx, conn, DefaultWorkers, false, jobs)
	if err != nil {
		return fmt.Errorf("topology: check for other prefixes' topologies: %w", err)
	}
	var found []error
	for i, c := range cands {
		switch {
		case errs[i] == nil:
			found = append(found, fmt.Errorf("%w: %s %q is an object of the delay topology of prefix %q in this vhost (its "+
				"parking queue %q exists): binding it into this topology would send this topology's messages into that one's; "+
				"choose another name", ErrInvalidSpec, c.what, c.name, c.prefix, Names{Prefix: c.prefix}.Parking()))
		case code(errs[i]) == amqp.NotFound:
		default:
			return wrapBroker(errs[i], fmt.Sprintf("check whether prefix %q has a topology", c.prefix))
		}
	}
	return errors.Join(found...)
}
