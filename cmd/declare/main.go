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

// Exit codes, documented in docs/operations.md, doc.go and the help.
const (
	exitOK      = 0
	exitRuntime = 1 // broker unreachable or refusing, incomplete topology, teardown refused
	exitUsage   = 2 // bad flags or specification, missing target exchange, topology conflict
)

// Main runs the CLI with the process's arguments and environment and exits with its exit code
// (0, 1 or 2, see the package comment). An interrupt or SIGTERM cancels the running command.
// cmd/rabbitdelay, the installed binary, is a call of Main.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // after "rabbitdelay <name>"
	help    string
	extra   func(s *settings) []option
	run     func(ctx context.Context, e *invocation) error
	long    bool // runs until interrupted: --timeout bounds each of its steps, not the command
	args    bool // takes positional arguments (invocation.args)
}

// invocation is one run of a command.
type invocation struct {
	s      settings
	stdout io.Writer
	stderr io.Writer
	log    zerolog.Logger
	args   []string // positional arguments, for a command with args set
}

func commands() []command {
	return []command{
		planCommand(),
		applyCommand(),
		statusCommand(),
		exportCommand(),
		teardownCommand(),
		rebalanceCommand(), // cluster.go
		exporterCommand(),  // exporter.go
		schedulesCommand(), // schedule.go
		scheduleCommand(),  // schedule.go
	}
}

func outputOption(s *settings) option {
	return option{name: "output", arg: "FORMAT", def: "table", usage: "table or json",
		set: func(v string) error {
			if v != "table" && v != "json" {
				return fmt.Errorf("want table or json, not %q", v)
			}
			s.output = v
			return nil
		}}
}

// usageError is bad input: exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// run is the whole CLI: it returns the exit code. It reads the AMQPDELAY_* variables of the
// process (delayspec.ReadEnv), then args.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		if len(args) > 1 && args[0] == "help" {
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		printUsage(w)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var cmd *command
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
		if c.name == args[0] {
			cmd = &c
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "rabbitdelay: unknown command %q (want %s or %s; see rabbitdelay --help)\n",
			args[0], strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
		return exitUsage
	}
	inv := &invocation{stdout: stdout, stderr: stderr}
	inv.s = settings{output: "table"}
	opts := append(commonOptions(&inv.s), cmd.extra(&inv.s)...)
	rest, err := parse(cmd.name, opts, args[1:], &inv.s)
	if errors.Is(err, flag.ErrHelp) {
		printCommandUsage(stdout, cmd, opts)
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
	cancel := func() {}
	if !cmd.long {
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(time.Duration(inv.s.vars.Timeout), defaultTimeout))
	}
	defer cancel()
	err = cmd.run(ctx, inv)
	if err == nil {
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

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var u usageError
	switch {
	case errors.As(err, &u),
		errors.Is(err, delayspec.ErrInvalidSpec),
		errors.Is(err, amqpconn.ErrConfig),
		errors.Is(err, admin.ErrConflict),
		errors.Is(err, admin.ErrTargetMissing):
		return exitUsage
	default:
		return exitRuntime
	}
}

// hint adds advice for broker refusals at connection time.
func hint(err error) string {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return ""
	}
	switch ae.Code {
	case amqp.AccessRefused:
		if strings.Contains(ae.Reason, "username or password") {
			return " (check the user name and password of --url / AMQPDELAY_URL)"
		}
	case amqp.NotAllowed:
		if strings.Contains(ae.Reason, "vhost") {
			return " (the vhost is the URL's path: it does not exist, or the user has no permissions on it: " +
				"rabbitmqctl add_vhost / set_permissions -p <vhost> <user> '.*' '.*' '.*', or fix --url / AMQPDELAY_URL)"
		}
	}
	return ""
}

// newLogger returns the logger of format (console, the default, or json) and level (a zerolog
// level name; default info), writing to w; the settings' Decode methods have checked both.
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
	var s settings
	printOptions(w, commonOptions(&s))
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

func printCommandUsage(w io.Writer, c *command, opts []option) {
	fmt.Fprintf(w, "Usage: rabbitdelay %s [flags]%s\n\n%s\n\nFlags:\n", c.name, strings.TrimRight(" "+c.usage, " "), c.help)
	printOptions(w, opts)
}

// dial connects with the command's settings.
func (e *invocation) dial(ctx context.Context) (*amqp.Connection, error) {
	conn, err := amqpconn.Dial(ctx, e.s.vars.Conn(), "rabbitdelay-declare")
	if err != nil {
		return nil, err
	}
	e.log.Debug().Str("urls", e.s.vars.Conn().Redacted()).Str("node", conn.RemoteAddr().String()).Msg("connected")
	return conn, nil
}

// vhost is the vhost of the URL.
func (e *invocation) vhost() string {
	u, err := amqp.ParseURI(e.s.vars.Conn().URLOrDefault())
	if err != nil || u.Vhost == "" {
		return "/"
	}
	return u.Vhost
}

// management returns the management API client, or nil without --management-url.
func (e *invocation) management() (*admin.Management, error) {
	if e.s.vars.ManagementURL == "" {
		return nil, nil
	}
	m, err := admin.NewManagement(e.s.vars.ManagementURL, e.vhost())
	if err != nil {
		return nil, fmt.Errorf("AMQPDELAY_MANAGEMENT_URL (--management-url): %w", err)
	}
	return m, nil
}

// managed returns the plan and the management API client of a command that cannot run without
// the latter; without --management-url it returns a usage error saying missing(plan).
func (e *invocation) managed(missing func(p *admin.Plan) string) (*admin.Plan, *admin.Management, error) {
	p, err := e.plan()
	if err != nil {
		return nil, nil, err
	}
	m, err := e.management()
	if err != nil {
		return nil, nil, usageError{err}
	}
	if m == nil {
		return nil, nil, usageError{errors.New(missing(p))}
	}
	return p, m, nil
}

// plan validates the specification and computes the plan: usage errors.
func (e *invocation) plan() (*admin.Plan, error) {
	p, err := admin.NewPlan(e.s.vars.Spec())
	if err != nil {
		return nil, usageError{err}
	}
	return p, nil
}

// resolvePlugin asks the broker about the plugin (unless off) and returns the plan to use.
func (e *invocation) resolvePlugin(ctx context.Context, p *admin.Plan, m *admin.Management) (*admin.Plan, error) {
	if p.Spec.Plugin == delayspec.PluginOff {
		return p, nil
	}
	avail, err := e.probePlugin(ctx, p, m)
	if err != nil {
		return nil, err
	}
	if avail {
		e.log.Info().Msg("delayed-message plugin: available")
	} else {
		e.log.Info().Msg("delayed-message plugin: not available on this broker (the ladder and buckets work without it)")
	}
	return p.ForPlugin(avail)
}

// probePlugin reports whether the broker has the delayed-message plugin: from the exchange
// types the management API lists when m is set (it declares nothing, so it suits read-only
// users), else with an AMQP probe that declares and deletes a temporary exchange.
func (e *invocation) probePlugin(ctx context.Context, p *admin.Plan, m *admin.Management) (bool, error) {
	if m != nil {
		return admin.ProbePluginManagement(ctx, m)
	}
	return admin.ProbePlugin(ctx, e.dial, p.Spec.Prefix)
}

// plural gives "1 object" or "n objects" (text.Plural).
func plural(n int, noun string) string { return text.Plural(n, noun) }
