package declare

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// Exit codes, documented in docs/operations.md and the help.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// Main runs the CLI with the process's arguments and environment and exits with its exit code
// (0, 1 or 2, docs/operations.md). An interrupt or SIGTERM cancels the running command.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type command struct {
	name, summary string
	usage         string // after "rabbitdelay <name> [flags]"
	help          string
	extra         func(s *settings) []option
	run           func(ctx context.Context, e *invocation) error
	long          bool // runs until interrupted: --timeout bounds each of its steps, not the command
	args          bool // takes positional arguments (invocation.args)
}

type invocation struct {
	s              settings
	stdout, stderr io.Writer
	log            zerolog.Logger
	args           []string
}

func commands() []command {
	return []command{planCommand, applyCommand, statusCommand, exportCommand, teardownCommand, rebalanceCommand,
		exporterCommand, schedulesCommand, scheduleCommand}
}

// usageError is bad input: exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// run is the whole CLI, reading the process's AMQPDELAY_* variables and args: it returns the
// exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		fallthrough
	case "-h", "--help", "-help":
		printUsage(stdout)
		return exitOK
	}
	cmds := commands()
	i := slices.IndexFunc(cmds, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		names := mapList(cmds, func(c command) string { return c.name })
		fmt.Fprintf(stderr, "rabbitdelay: unknown command %q (want %s or %s; see rabbitdelay --help)\n",
			args[0], strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
		return exitUsage
	}
	cmd := &cmds[i]
	inv := &invocation{stdout: stdout, stderr: stderr, s: settings{output: "table"}}
	opts := append(commonOptions(&inv.s), cmd.extra(&inv.s)...)
	rest, err := parse(cmd.name, opts, args[1:], &inv.s)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: rabbitdelay %s [flags]%s\n\n%s\n\nFlags:\n", cmd.name, strings.TrimRight(" "+cmd.usage, " "), cmd.help)
		printOptions(stdout, opts)
		return exitOK
	}
	inv.args = rest
	if err == nil && len(rest) > 0 && !cmd.args {
		err = fmt.Errorf("unexpected argument %q (flags only; lists are repeated flags or comma-separated variables)", rest[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "rabbitdelay %s: %s\nSee rabbitdelay %s --help.\n", cmd.name, err, cmd.name)
		return exitUsage
	}
	inv.log = newLogger(string(inv.s.vars.LogFormat), string(inv.s.vars.LogLevel), stderr)
	if !cmd.long {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(time.Duration(inv.s.vars.Timeout), defaultTimeout))
		defer cancel()
	}
	if err = cmd.run(ctx, inv); err == nil {
		return exitOK
	}
	code := exitCode(err)
	msg := err.Error() + hint(err)
	if inv.log.GetLevel() <= zerolog.ErrorLevel {
		inv.log.Error().Int("exit_code", code).Msg(msg)
	} else {
		fmt.Fprintf(stderr, "rabbitdelay %s: %s\n", cmd.name, msg)
	}
	return code
}

func exitCode(err error) int {
	for _, target := range []error{delayspec.ErrInvalidSpec, amqpconn.ErrConfig, admin.ErrConflict, admin.ErrTargetMissing} {
		if errors.Is(err, target) {
			return exitUsage
		}
	}
	if errors.As(err, new(usageError)) {
		return exitUsage
	}
	return exitRuntime
}

func hint(err error) string {
	var ae *amqp.Error
	switch {
	case !errors.As(err, &ae):
	case ae.Code == amqp.AccessRefused && strings.Contains(ae.Reason, "username or password"):
		return " (check the user name and password of --url / AMQPDELAY_URL)"
	case ae.Code == amqp.NotAllowed && strings.Contains(ae.Reason, "vhost"):
		return " (the vhost is the URL's path: it does not exist, or the user has no permissions on it: " +
			"rabbitmqctl add_vhost / set_permissions -p <vhost> <user> '.*' '.*' '.*', or fix --url / AMQPDELAY_URL)"
	}
	return ""
}

func newLogger(format, level string, w io.Writer) zerolog.Logger {
	lvl, _ := zerolog.ParseLevel(cmp.Or(level, "info"))
	if format != "json" {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `rabbitdelay: declare, check, inspect, export and tear down rabbitdelay's delay topology.

Usage: rabbitdelay <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Every flag can also be set by its environment variable; a flag given on the command line wins.
Flags common to every command:
`)
	printOptions(w, commonOptions(&settings{}))
	fmt.Fprint(w, `
Exit codes (docs/operations.md):
  0  success; for status: no problem found
  1  runtime failure: broker unreachable or refusing (password, vhost, permissions), the topology
     not declared, incomplete or unhealthy (status), a policy in effect that breaks a guarantee
     (apply, status), a requeue loop on a ready queue or the parking queue (status), the plugin
     required (--plugin on) but missing, teardown refused because queues hold messages
  2  usage: unknown command or flag, invalid value or specification, a missing target exchange
     (one given without a type that does not exist), or a topology conflict (an object exists
     with other arguments)

Run rabbitdelay <command> --help for a command's own flags.
`)
}

func (e *invocation) dial(ctx context.Context) (*amqp.Connection, error) {
	conn, err := amqpconn.Dial(ctx, e.s.vars.Conn(), "rabbitdelay-declare")
	if err != nil {
		return nil, err
	}
	e.log.Debug().Str("urls", e.s.vars.Conn().Redacted()).Str("node", conn.RemoteAddr().String()).Msg("connected")
	return conn, nil
}

// vhost is the vhost of the URL, "/" when it has none.
func (e *invocation) vhost() string {
	u, err := amqp.ParseURI(e.s.vars.Conn().URLOrDefault())
	if err != nil || u.Vhost == "" {
		return "/"
	}
	return u.Vhost
}

// management returns the management API client, or nil without --management-url; its error
// is a usage error.
func (e *invocation) management() (*admin.Management, error) {
	if e.s.vars.ManagementURL == "" {
		return nil, nil
	}
	m, err := admin.NewManagement(e.s.vars.ManagementURL, e.vhost())
	if err != nil {
		return nil, usageError{fmt.Errorf("AMQPDELAY_MANAGEMENT_URL (--management-url): %w", err)}
	}
	return m, nil
}

// managed returns the plan and the management API client of a command that needs the latter;
// without --management-url, a usage error saying missing(plan).
func (e *invocation) managed(missing func(p *admin.Plan) string) (*admin.Plan, *admin.Management, error) {
	p, err := e.plan()
	if err != nil {
		return nil, nil, err
	}
	m, err := e.management()
	if err == nil && m == nil {
		err = usageError{errors.New(missing(p))}
	}
	return p, m, err
}

func (e *invocation) plan() (*admin.Plan, error) {
	p, err := admin.NewPlan(e.s.vars.Spec())
	if err != nil {
		return nil, usageError{err}
	}
	return p, nil
}

// probePlugin reports whether the broker has the delayed-message plugin: from the management
// API's exchange types when m is set (declaring nothing), else with an AMQP probe that declares
// and deletes a temporary exchange.
func (e *invocation) probePlugin(ctx context.Context, p *admin.Plan, m *admin.Management) (bool, error) {
	if m != nil {
		return admin.ProbePluginManagement(ctx, m)
	}
	return admin.ProbePlugin(ctx, e.dial, p.Spec.Prefix)
}

func plural(n int, noun string) string { return text.Plural(n, noun) }
