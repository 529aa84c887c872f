package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// TeardownOptions tune [Teardown].
type TeardownOptions struct {
	Force bool // deletes queues that hold messages (the messages are lost)
	// ReadyQueues also deletes the plan's ready queues (same emptiness rule); by default they
	// are left to the applications that consume them.
	ReadyQueues bool
	DryRun      bool // deletes nothing; the report gives StateDeleted to what would be deleted
	Workers     int  // number of channels to work on in parallel; 0 means DefaultWorkers
	// Management counts every message a queue holds; without it only ready ones are seen.
	Management *Management
	Logger     zerolog.Logger // receives a debug line per deletion; the zero value logs nothing
}

// Teardown deletes p's delay topology: queues (parking last), then exchanges, with
// opts.ReadyQueues the ready queues, and with opts.Management its policies (else
// StateSkipped). It never touches target exchanges.
//
// Unless opts.Force is set, a queue holding messages makes it delete nothing and return
// ErrNotEmpty naming the queues; without opts.Management, quorum queues return ErrCannotCount.
// Quorum queues have no if-empty delete, so a message published between count and delete is
// lost: stop publishers first. Messages the plugin holds and that fall due before the next
// apply are lost too.
//
// The report lists every object as deleted or absent, and Report.Unplanned. Errors are the
// broker's, wrapped (ErrAccessRefused for 403).
func Teardown(ctx context.Context, conn *amqp.Connection, p *Plan, opts TeardownOptions) (*Report, error) {
	start := time.Now()
	rep := &Report{}
	defer func() { rep.Elapsed = time.Since(start) }()
	r := &runner{ctx: ctx, conn: conn, workers: opts.Workers, log: opts.Logger, op: "teardown", rep: rep, rows: map[string]int{}}
	phases := doomedOf(p, opts)
	all := slices.Concat(phases...)
	if err := r.lookUpDoomed(p, all, opts); err != nil {
		return rep, err
	}
	if err := refuseUnsafe(all, opts); err != nil {
		return rep, err
	}
	for _, d := range all {
		row := Result{Kind: d.kind, Name: d.name, State: StateAbsent}
		if d.exists {
			row.State = StateNotDeleted // until it is
			if opts.DryRun {
				row.State = StateDeleted // dry run: would be
			}
			if d.held > 0 {
				row.Detail = "held " + text.Plural(int(d.held), "message")
			}
		}
		r.add(row)
	}
	if opts.DryRun {
		return rep, teardownPolicies(ctx, p, opts, rep)
	}
	for _, ph := range phases {
		var steps []step
		for _, d := range ph {
			if d.exists {
				steps = append(steps, d.del)
			}
		}
		if err := r.run(steps, StateDeleted, deleteFailed); err != nil {
			return rep, err
		}
	}
	return rep, teardownPolicies(ctx, p, opts, rep)
}

// doomedOf lists what Teardown deletes, by phase: queues (delay, ready, the streams), the
// parking queue, then the exchanges one by one from where messages enter to where they leave.
func doomedOf(p *Plan, opts TeardownOptions) [][]*doomed {
	var queues []*doomed
	stream := func(q Queue) bool { return q.Role == RoleRevoked || q.Role == RoleSpec }
	for _, pass := range []func(Queue) bool{Queue.IsDelay, func(q Queue) bool { return opts.ReadyQueues && q.Role == RoleReady }, stream} {
		for _, q := range p.Queues {
			if pass(q) {
				// The streams hold only records, meaningless without the delay queues: deleted
				// whatever they hold.
				queues = append(queues, doomedQueue(q, opts.Force || stream(q), stream(q), opts.Logger))
			}
		}
	}
	pq, _ := p.Queue(p.Names.Parking())
	phases := [][]*doomed{queues, {doomedQueue(pq, opts.Force, false, opts.Logger)}}
	names := []string{p.Names.PluginExchange(), p.Names.BucketExchange()}
	for _, e := range p.Exchanges {
		if e.Role == RoleLadder {
			names = append(names, e.Name)
		}
	}
	for _, name := range append(names, p.Names.Dispatch(), p.Names.Retry(), p.Names.DueUnroutable(), p.Names.Unroutable()) {
		phases = append(phases, []*doomed{doomedExchange(name)})
	}
	return phases
}

// lookUpDoomed finds which of all exist and what each queue holds, and, with opts.Management,
// the unplanned objects of p's naming rule.
func (r *runner) lookUpDoomed(p *Plan, all []*doomed, opts TeardownOptions) error {
	lookups := make([]step, len(all))
	for i, d := range all {
		lookups[i] = d.lookup
	}
	errs, err := r.look(lookups)
	if err != nil {
		return fmt.Errorf("topology: teardown: %w", err)
	}
	var managed map[string]ManagedQueue
	if m := opts.Management; m != nil {
		var names []string
		err := parallel(
			func() (err error) { managed, err = m.Queues(r.ctx); return err },
			func() (err error) { names, err = m.exchangeNames(r.ctx); return err })
		if err != nil {
			return err
		}
		r.rep.Unplanned = unplannedOf(p, names, managed)
	}
	ok, err := found(errs, func(i int) string { return fmt.Sprintf("look up %s %q", all[i].kind, all[i].name) })
	if err != nil {
		return err
	}
	for i, d := range all {
		d.exists = ok[i]
		if d.kind == KindQueue && d.exists && !d.records {
			d.held = int64(d.found.Messages)
			if m, ok := managed[d.name]; ok {
				d.held = max(d.held, m.Messages, m.MessagesDLX)
			}
		}
	}
	return nil
}

// refuseUnsafe returns, unless opts.Force is set, ErrNotEmpty when a queue of all holds
// messages, and ErrCannotCount when, without the management API, a quorum queue exists.
func refuseUnsafe(all []*doomed, opts TeardownOptions) error {
	if opts.Force {
		return nil
	}
	var full, blind []string
	for _, d := range all {
		if d.held > 0 {
			full = append(full, fmt.Sprintf("%s (%s)", d.name, text.Plural(int(d.held), "message")))
		}
		if d.kind == KindQueue && d.exists && !d.classic && !d.records {
			blind = append(blind, d.name)
		}
	}
	if len(full) > 0 {
		return fmt.Errorf("%w: %s; nothing was deleted: wait until they are delivered (rabbitdelay status), or use --force to delete them with their messages",
			ErrNotEmpty, strings.Join(full, ", "))
	}
	if len(blind) > 0 && opts.Management == nil {
		return fmt.Errorf("%w: %d quorum queues (the first: %s): AMQP counts only their ready messages, not the "+
			"unacknowledged ones nor those held for dead-lettering (messages_dlx); nothing was deleted: give the management API "+
			"(--management-url) so teardown can count them, or use --force to delete them with whatever they hold",
			ErrCannotCount, len(blind), blind[0])
	}
	return nil
}

// doomed is one queue or exchange that Teardown deletes when it exists.
type doomed struct {
	kind        Kind
	name        string
	classic     bool // queue.delete's if-empty works
	lookup, del step
	exists      bool
	found       amqp.Queue // the passive declaration's answer (queues)
	held        int64      // messages the queue holds
	records     bool       // a stream: deleted whatever it holds
}

func doomedQueue(q Queue, force, records bool, log zerolog.Logger) *doomed {
	name := q.Name
	t, _ := q.Args["x-queue-type"].(string)
	classic := t == "" || t == string(delayspec.Classic)
	d := &doomed{kind: KindQueue, name: name, classic: classic, records: records}
	d.lookup = step{KindQueue, name, func(ch *amqp.Channel) error {
		var err error
		d.found, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	}}
	d.del = step{KindQueue, name, func(ch *amqp.Channel) error {
		ifEmpty := !force
		if ifEmpty && !classic {
			// Quorum queues refuse if-empty with 540 NOT_IMPLEMENTED, a connection error that
			// ends every job in flight: look again just before deleting instead.
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
			log.Warn().Str("queue", name).Int("messages", n).Msg("deleted a queue with its messages")
		}
		return err
	}}
	return d
}

func doomedExchange(name string) *doomed {
	return &doomed{kind: KindExchange, name: name,
		lookup: step{KindExchange, name, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(name, amqp.ExchangeHeaders, true, false, false, false, nil)
		}},
		del: step{KindExchange, name, func(ch *amqp.Channel) error {
			return ch.ExchangeDelete(name, false, false)
		}},
	}
}

func deleteFailed(row *Result, err error) error {
	if code(err) == amqp.PreconditionFailed {
		return fmt.Errorf("%w: %s %q received messages during teardown and was not deleted (%v); run teardown again, or with --force",
			ErrNotEmpty, row.Kind, row.Name, err)
	}
	return wrapBroker(err, fmt.Sprintf("delete %s %q", row.Kind, row.Name))
}

// teardownPolicies deletes the plan's policies (management API only) and adds their results.
func teardownPolicies(ctx context.Context, p *Plan, opts TeardownOptions, rep *Report) error {
	if opts.Management == nil {
		for _, pol := range p.Policies {
			rep.Results = append(rep.Results, Result{Kind: KindPolicy, Name: pol.Name, State: StateSkipped,
				Detail: fmt.Sprintf("AMQP cannot delete policies: pass the management API, or run rabbitmqctl clear_policy -p <vhost> %s", shellQuote(pol.Name))})
		}
		return nil
	}
	res, err := opts.Management.writePolicies(ctx, p, opts.DryRun, true)
	rep.Results = append(rep.Results, res...)
	return err
}
