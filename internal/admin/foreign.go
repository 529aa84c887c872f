package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// foreignObjects returns an error wrapping ErrInvalidSpec when a target, ready queue or its
// exchange is an object of another prefix's topology whose parking queue exists: binding it
// would send this topology's messages into the other's.
func foreignObjects(ctx context.Context, conn *amqp.Connection, p *Plan) error {
	type candidate struct{ what, name, prefix string }
	var cands []candidate
	own := p.Names.Prefix
	for _, t := range p.Spec.Targets {
		for _, prefix := range delayspec.ForeignPrefixes(t.Name, own, false, false) {
			cands = append(cands, candidate{"target exchange", t.Name, prefix})
		}
	}
	for _, r := range p.Spec.ReadyQueues {
		for _, prefix := range delayspec.ForeignPrefixes(r.Exchange, own, false, false) {
			cands = append(cands, candidate{"ready queue's exchange", r.Exchange, prefix})
		}
		for _, prefix := range delayspec.ForeignPrefixes(r.Queue, own, true, true) {
			cands = append(cands, candidate{"ready queue", r.Queue, prefix})
		}
	}
	if len(cands) == 0 {
		return nil
	}
	jobs := make([]job, len(cands))
	for i, c := range cands {
		parking := delayspec.Names{Prefix: c.prefix}.Parking()
		jobs[i] = func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(parking, true, false, false, false, nil)
			return err
		}
	}
	errs, err := runJobs(ctx, conn, DefaultWorkers, false, jobs)
	if err != nil {
		return fmt.Errorf("topology: check for other prefixes' topologies: %w", err)
	}
	exists, err := found(errs, func(i int) string { return fmt.Sprintf("check whether prefix %q has a topology", cands[i].prefix) })
	var foreign []error
	for i, c := range cands {
		if err == nil && exists[i] {
			foreign = append(foreign, fmt.Errorf("%w: %s %q is an object of the delay topology of prefix %q in this vhost (its "+
				"parking queue %q exists): binding it into this topology would send this topology's messages into that one's; "+
				"choose another name", delayspec.ErrInvalidSpec, c.what, c.name, c.prefix, delayspec.Names{Prefix: c.prefix}.Parking()))
		}
	}
	return cmp.Or(err, errors.Join(foreign...))
}
