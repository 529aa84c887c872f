package declare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/schedule"
)

var schedulesCommand = command{name: "schedules", summary: "list the periodic schedules of the prefix, from the broker alone",
	help: "Reads the stream <prefix>.schedules (writing one marker record to find its end) and prints every schedule:\n" +
		"its definition, state, next occurrence (its pending link), the last occurrence fired and by which instance.\n" +
		"A schedule whose chain is broken (active, occurrences left, and no pending link: none recorded, or the one\n" +
		"recorded more than " + schedule.DefaultLinkGrace.String() + " past due and the links queue empty) is flagged, with the reason, and the\n" +
		"exit code is 1: declaring it again (schedule.Scheduler.Declare, as every instance does at start) repairs it.",
	extra: func(s *settings) []option { return []option{outputOption(s)} },
	run:   cmdSchedules}

var scheduleCommand = command{name: "schedule", summary: "pause, resume or remove a periodic schedule: schedule pause|resume|remove NAME",
	usage: "pause|resume|remove NAME",
	help: "pause: links that arrive are dropped until resume. resume: the schedule restarts with its first occurrence\n" +
		"after now. remove: no occurrence fires after it returns, and the pending link is revoked; an instance that\n" +
		"declares the schedule again at start brings it back, so remove it from the code too.",
	extra: func(s *settings) []option { return nil },
	args:  true,
	run:   cmdSchedule}

func (e *invocation) scheduleConfig() amqpdelay.Config {
	v := e.s.vars
	return amqpdelay.Config{URL: v.URL, TLSCA: v.TLSCA, TLSCert: v.TLSCert, TLSKey: v.TLSKey, Prefix: v.Prefix}
}

func cmdSchedules(ctx context.Context, e *invocation) error {
	infos, err := schedule.Inspect(ctx, e.scheduleConfig(), schedule.Options{})
	if err != nil {
		return err
	}
	if e.s.output == "json" {
		type row struct {
			Name      string `json:"name"`
			Timing    string `json:"definition"`
			Hash      string `json:"hash"`
			State     string `json:"state"`
			Next      string `json:"next,omitempty"`
			LastFired string `json:"last_fired,omitempty"`
			LastBy    string `json:"last_fired_by,omitempty"`
			Broken    bool   `json:"broken"`
			Problem   string `json:"problem,omitempty"`
			Ended     bool   `json:"ended"`
		}
		rows := mapList(infos, func(i schedule.Info) row {
			return row{Name: i.Schedule.Name, Timing: i.Schedule.String(), Hash: i.Hash, State: i.State,
				Next: tfmt(i.Next), LastFired: tfmt(i.LastFired), LastBy: i.LastBy, Broken: i.Broken, Problem: i.Problem, Ended: i.Ended}
		})
		if err := writeJSON(e.stdout, rows, nil); err != nil {
			return err
		}
	} else {
		if len(infos) == 0 {
			fmt.Fprintf(e.stdout, "no schedules under prefix %q\n", e.s.vars.Spec().Names().Prefix)
			return nil
		}
		err := table(e.stdout, "NAME\tSTATE\tNEXT\tLAST FIRED\tBY\tDEFINITION", infos, func(i schedule.Info) string {
			st := i.State
			switch {
			case i.Broken:
				st += " (chain broken)"
			case i.Ended:
				st += " (ended)"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", i.Schedule.Name, st, cmp.Or(tfmt(i.Next), "-"), cmp.Or(tfmt(i.LastFired), "-"),
				cmp.Or(i.LastBy, "-"), i.Schedule.String())
		})
		if err != nil {
			return err
		}
	}
	return brokenSchedules(infos)
}

// brokenSchedules is ErrUnhealthy naming each broken schedule and why, or nil.
func brokenSchedules(infos []schedule.Info) error {
	var broken []string
	for _, i := range infos {
		if i.Broken {
			broken = append(broken, fmt.Sprintf("%q (%s)", i.Schedule.Name, i.Problem))
		}
	}
	if len(broken) == 0 {
		return nil
	}
	return fmt.Errorf("%w: schedule chain broken, nothing of it will fire: %s; declaring the schedule again repairs it "+
		"(restart an instance that declares it at start, or call schedule.Scheduler.Declare)",
		admin.ErrUnhealthy, strings.Join(broken, "; "))
}

func (e *invocation) scheduleStatus(ctx context.Context) error {
	infos, err := schedule.Inspect(ctx, e.scheduleConfig(), schedule.Options{})
	if err != nil {
		e.log.Warn().Err(err).Msg("cannot read the schedules stream")
		return nil
	}
	return brokenSchedules(infos)
}

func cmdSchedule(ctx context.Context, e *invocation) error {
	if len(e.args) != 2 {
		return usageError{errors.New("want: rabbitdelay schedule pause|resume|remove NAME")}
	}
	verb, name := e.args[0], e.args[1]
	op, ok := map[string]func(*schedule.Scheduler, context.Context, string) error{
		"pause": (*schedule.Scheduler).Pause, "resume": (*schedule.Scheduler).Resume, "remove": (*schedule.Scheduler).Remove}[verb]
	if !ok {
		return usageError{fmt.Errorf("unknown action %q: want pause, resume or remove", verb)}
	}
	s, err := schedule.New(ctx, e.scheduleConfig(), schedule.Options{Instance: "declare-cli", ConnectionName: "rabbitdelay-declare-schedule"})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := op(s, ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schedule %q: %s\n", name, map[string]string{"pause": "paused", "resume": "resumed", "remove": "removed"}[verb])
	return nil
}

func tfmt(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
