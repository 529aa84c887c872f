package topology

import (
	"context"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/text"
)

// TeardownOptions tune [Teardown].
type TeardownOptions struct {
	// Force deletes queues that hold messages (the messages are lost).
	Force bool
	// ReadyQueues also deletes the plan's ready queues (with the same emptiness rule). By
	// default they are left: they belong to the applications that consume them.
	ReadyQueues bool
	// DryRun deletes nothing; the report gives StateDeleted to what would be deleted.
	DryRun bool
	// Workers is the number of channels to work on in parallel; 0 means DefaultWorkers.
	Workers int
	// Management, when set, counts every message a queue holds (unacknowledged and quorum
	// dead-letter state included); without it only ready messages are seen, and the
	// broker's if-empty check on delete catches the rest.
	Management *Management
	// Logger receives a debug line per deletion; the zero value logs nothing.
	Logger zerolog.Logger
}

// Teardown deletes the delay topology of p: the delay queues (ladder and bucket queues), the
// revocation stream (whatever it holds: its records are about delayed messages), the parking
// queue, the target markers, the ladder exchanges and marker, the bucket exchange,
// the plugin exchange, the dispatch exchange, the alternate exchanges (and, with
// opts.ReadyQueues, the ready queues), and last, with opts.Management, the topology's
// policies (without it they are reported as StateSkipped: AMQP cannot delete policies).
// It never touches target exchanges, also those the topology declared (name:type).
//
// Unless opts.Force is set it first counts the messages of every queue it would delete and,
// when any holds messages, deletes nothing and returns an error wrapping ErrNotEmpty that
// names them. Without opts.Management it cannot count the unacknowledged and dead-letter-state
// messages of quorum queues, so it refuses (ErrCannotCount) unless opts.Force is set. The
// deletions of classic queues then use queue.delete's if-empty flag, so a
// message that arrives in between makes the broker refuse (406) rather than lose it. Quorum
// queues do not support that flag (RabbitMQ answers 540 NOT_IMPLEMENTED and closes the
// connection), so each is looked at again just before it is deleted: a message published in
// that instant would be lost. Stop publishers before a teardown. Queues are deleted before
// exchanges, the parking queue last.
//
// Messages already held by the delayed-message plugin are not counted (they are in no queue)
// and not removed by deleting its exchange: the plugin stores them apart and delivers those
// that fall due after the topology (plugin exchange, its binding, the dispatch exchange) has
// been applied again; those that fall due in between are lost (seen on 3.10.8).
//
// The report lists every object as deleted or absent (Detail says how many messages a
// forced delete discarded) and, with opts.Management, the objects with the plan's prefix that
// the plan does not name (Report.Unplanned), which it leaves in place: tear those down with
// the specification that declared them. Errors are the broker's, wrapped (ErrAccessRefused for 403).
func Teardown(ctx context.Context, conn *amqp.Connection, p *Plan, opts TeardownOptions) (*Report, error) {
	start := time.Now()
	rep := &Report{}
	defer func() { rep.Elapsed = time.Since(start) }()

	// What to delete, in order: queues (delay, ready, parking last), then exchanges from
	// where messages enter (plugin, buckets, ladder) to where they leave (D, unroutable).
	var queues []string
	for _, q := range p.Queues {
		if q.IsDelay() {
			queues = append(queues, q.Name)
		}
	}
	if opts.ReadyQueues {
		for _, q := range p.Queues {
			if q.Role == RoleReady {
				queues = append(queues, q.Name)
			}
		}
	}
	// The revocation stream holds no delayed message, only records about them, which mean
	// nothing once the delay queues are gone: it is deleted whatever it holds.
	revoked := map[string]bool{}
	for _, q := range p.Queues {
		if q.Role == RoleRevoked {
			queues, revoked[q.Name] = append(queues, q.Name), true
		}
	}
	queues = append(queues, p.Names.Parking())
	// classic marks the plan's classic queues: only they support queue.delete's if-empty.
	classic := map[string]bool{}
	for _, q := range p.Queues {
		if t, _ := q.Args["x-queue-type"].(string); t == "" || t == string(Classic) {
			classic[q.Name] = true
		}
	}
	// The target markers first: publishers that check them stop trusting the topology.
	var exchanges []string
	for _, e := range p.Exchanges {
		if e.Marker && e.Role == RoleDispatch {
			exchanges = append(exchanges, e.Name)
		}
	}
	exchanges = append(exchanges, p.Names.PluginExchange(), p.Names.BucketExchange())
	for _, e := range p.Exchanges {
		if e.Role == RoleLadder {
			exchanges = append(exchanges, e.Name)
		}
	}
	exchanges = append(exchanges, p.Names.Dispatch(), p.Names.Retry(), p.Names.DueUnroutable(), p.Names.Unroutable())

	// What exists, and what it holds.
	var jobs []job
	found := make([]amqp.Queue, len(queues))
	for i, name := range queues {
		jobs = append(jobs, func(ch *amqp.Channel) error {
			var err error
			found[i], err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return err
		})
	}
	for _, name := range exchanges {
		jobs = append(jobs, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(name, amqp.ExchangeHeaders, true, false, false, false, nil)
		})
	}
	errs, err := runJobs(ctx, conn, opts.Workers, false, jobs)
	if err != nil {
		return rep, fmt.Errorf("topology: teardown: %w", err)
	}
	var managed map[string]ManagedQueue
	if opts.Management != nil {
		if managed, err = opts.Management.Queues(ctx); err != nil {
			return rep, err
		}
		if rep.Unplanned, err = opts.Management.unplanned(ctx, p, managed); err != nil {
			return rep, err
		}
	}
	exists := make([]bool, len(jobs))
	held := make([]int64, len(queues))
	var full []string
	for i, e := range errs {
		switch {
		case e == nil:
			exists[i] = true
		case code(e) == amqp.NotFound:
		default:
			what := fmt.Sprintf("queue %q", queues[min(i, len(queues)-1)])
			if i >= len(queues) {
				what = fmt.Sprintf("exchange %q", exchanges[i-len(queues)])
			}
			return rep, wrapBroker(e, "look up "+what)
		}
		if i < len(queues) && exists[i] && !revoked[queues[i]] {
			held[i] = int64(found[i].Messages)
			if m, ok := managed[queues[i]]; ok {
				held[i] = max(held[i], m.Messages, m.MessagesDLX)
			}
			if held[i] > 0 {
				full = append(full, fmt.Sprintf("%s (%s)", queues[i], text.Plural(int(held[i]), "message")))
			}
		}
	}
	if len(full) > 0 && !opts.Force {
		return rep, fmt.Errorf("%w: %s; nothing was deleted: wait until they are delivered (declare status), or use --force to delete them with their messages",
			ErrNotEmpty, strings.Join(full, ", "))
	}
	if !opts.Force && opts.Management == nil {
		var blind []string
		for i, name := range queues {
			if exists[i] && !classic[name] && !revoked[name] {
				blind = append(blind, name)
			}
		}
		if len(blind) > 0 {
			return rep, fmt.Errorf("%w: %d quorum queues (the first: %s): AMQP counts only their ready messages, not the "+
				"unacknowledged ones nor those held for dead-lettering (messages_dlx); nothing was deleted: give the management API "+
				"(--management-url) so teardown can count them, or use --force to delete them with whatever they hold",
				ErrCannotCount, len(blind), blind[0])
		}
	}

	// Delete.
	names := append(append([]string{}, queues...), exchanges...)
	for i, name := range names {
		kind := KindQueue
		if i >= len(queues) {
			kind = KindExchange
		}
		r := Result{Kind: kind, Name: name, State: StateAbsent}
		if exists[i] {
			r.State = StateNotDeleted // until it is
			if opts.DryRun {
				r.State = StateDeleted // dry run: would be
			}
			if kind == KindQueue && held[i] > 0 {
				r.Detail = strings.TrimPrefix(r.Detail+"; held "+text.Plural(int(held[i]), "message"), "; ")
			}
		}
		rep.Results = append(rep.Results, r)
	}
	if opts.DryRun {
		return rep, teardownPolicies(ctx, p, opts, rep)
	}
	del := func(from, to int) error {
		var jobs []job
		var idx []int
		for i := from; i < to; i++ {
			if !exists[i] {
				continue
			}
			name := names[i]
			idx = append(idx, i)
			if i < len(queues) {
				jobs = append(jobs, func(ch *amqp.Channel) error {
					ifEmpty := !opts.Force && !revoked[name]
					if ifEmpty && !classic[name] {
						// Quorum queues refuse queue.delete's if-empty with 540 NOT_IMPLEMENTED, a
						// connection error that ends every job in flight. Look again just before
						// deleting instead.
						q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
						if err != nil {
							return err
						}
						if q.Messages > 0 {
							return &amqp.Error{Code: amqp.PreconditionFailed, Reason: text.Plural(q.Messages, "message") + " ready"}
						}
						ifEmpty = false
					}
					n, err := ch.QueueDelete(name, false, ifEmpty, false)
					if err == nil && n > 0 {
						opts.Logger.Warn().Str("queue", name).Int("messages", n).Msg("deleted a queue with its messages")
					}
					return err
				})
			} else {
				jobs = append(jobs, func(ch *amqp.Channel) error {
					return ch.ExchangeDelete(name, false, false)
				})
			}
		}
		errs, err := runJobs(ctx, conn, opts.Workers, true, jobs)
		if err != nil {
			return fmt.Errorf("topology: teardown: %w", err)
		}
		for k, e := range errs {
			r := &rep.Results[idx[k]]
			if e == nil {
				r.State = StateDeleted
				opts.Logger.Debug().Str("kind", string(r.Kind)).Str("name", r.Name).Msg("deleted")
			}
		}
		if k, e := firstErr(errs); e != nil {
			r := &rep.Results[idx[k]]
			if code(e) == amqp.PreconditionFailed {
				return fmt.Errorf("%w: %s %q received messages during teardown and was not deleted (%v); run teardown again, or with --force",
					ErrNotEmpty, r.Kind, r.Name, e)
			}
			return wrapBroker(e, fmt.Sprintf("delete %s %q", r.Kind, r.Name))
		}
		return nil
	}
	// Delay and ready queues, then the parking queue, then the exchanges one by one in order.
	if err := del(0, len(queues)-1); err != nil {
		return rep, err
	}
	if err := del(len(queues)-1, len(queues)); err != nil {
		return rep, err
	}
	for i := len(queues); i < len(names); i++ {
		if err := del(i, i+1); err != nil {
			return rep, err
		}
	}
	return rep, teardownPolicies(ctx, p, opts, rep)
}

// teardownPolicies deletes the plan's policies (the management API is needed) and adds
// their results to rep.
func teardownPolicies(ctx context.Context, p *Plan, opts TeardownOptions, rep *Report) error {
	if opts.Management == nil {
		for _, pol := range p.Policies {
			rep.Results = append(rep.Results, Result{Kind: KindPolicy, Name: pol.Name, State: StateSkipped,
				Detail: fmt.Sprintf("AMQP cannot delete policies: pass the management API, or run rabbitmqctl clear_policy -p <vhost> %s", shellQuote(pol.Name))})
		}
		return nil
	}
	res, err := opts.Management.DeletePolicies(ctx, p, opts.DryRun)
	rep.Results = append(rep.Results, res...)
	return err
}
