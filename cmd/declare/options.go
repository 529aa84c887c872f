package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/topology"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// settings is everything a command reads from its flags and the AMQPDELAY_* variables.
type settings struct {
	conn      amqpconn.Config
	spec      topology.Spec
	mgmtURL   string
	logFormat string
	logLevel  string
	timeout   time.Duration
	workers   int

	// command-specific
	output      string
	dryRun      bool
	vhost       string
	force       bool
	readyQueues bool
}

// option is one flag, with the environment variable that sets it when the flag is absent.
type option struct {
	name  string // flag name, used as --name
	env   string // variable name, "" when none
	arg   string // placeholder in the help, "" for booleans
	def   string // default shown in the help
	usage string
	set   func(string) error // from a flag
	// setEnv, when not nil, takes the variable's value instead of set (list options).
	setEnv func(string) error
	list   bool // repeatable flag; the variable holds a comma-separated list
	bool   bool
}

// listOption builds a repeatable option: values from the variable are replaced, not extended,
// by the first flag given on the command line (flags win).
func listOption(name, env, arg, usage string, reset func(), add func(string) error) option {
	flagSeen := false
	return option{name: name, env: env, arg: arg, usage: usage, list: true,
		setEnv: func(s string) error { reset(); return add(s) },
		set: func(s string) error {
			if !flagSeen {
				reset()
				flagSeen = true
			}
			return add(s)
		}}
}

// commonOptions are the connection, specification and logging options every command takes.
func commonOptions(s *settings) []option {
	str := func(p *string) func(string) error { return func(v string) error { *p = v; return nil } }
	dur := func(p *time.Duration, what string) func(string) error {
		return func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				if strings.Contains(err.Error(), "invalid duration") && strings.Trim(v, "0123456789.hmsuµn") == "" {
					return fmt.Errorf("%s %q is too long for a Go duration (at most about 2562047h)", what, v)
				}
				return fmt.Errorf("%s %q is not a duration (want e.g. 1ms, 30s, 720h)", what, v)
			}
			*p = d
			return nil
		}
	}
	envLadder := topology.EnvPrefix + "_LADDER_"
	env := func(n string) string { return topology.EnvPrefix + "_" + n }
	return []option{
		{name: "url", env: env("URL"), arg: "URL", def: amqpconn.DefaultURL, set: str(&s.conn.URL),
			usage: "broker URL, amqp:// or amqps://; the vhost is the URL's path (%2F for \"/\")"},
		{name: "tls-ca", env: env("TLS_CA"), arg: "FILE", set: str(&s.conn.TLSCA),
			usage: "PEM file of CA certificates to verify the broker with (amqps:// only; default: system roots)"},
		{name: "tls-cert", env: env("TLS_CERT"), arg: "FILE", set: str(&s.conn.TLSCert),
			usage: "PEM client certificate (amqps:// only; with --tls-key)"},
		{name: "tls-key", env: env("TLS_KEY"), arg: "FILE", set: str(&s.conn.TLSKey),
			usage: "PEM key of the client certificate"},
		{name: "prefix", env: env("PREFIX"), arg: "PREFIX", def: topology.DefaultPrefix, set: str(&s.spec.Prefix),
			usage: "name prefix of every object (<prefix>.dispatch, <prefix>.ladder.LL.DD, ...); letters, digits and . _ - :"},
		listOption("target", env("TARGETS"), "EXCHANGE[:TYPE]",
			"target exchange delayed messages are finally routed through (repeatable; the variable is comma-separated); "+
				"it must exist, unless given as name:type (direct, fanout, topic, headers), which declares it durable; "+
				"at most 255 bytes, not one of the topology's own names (<prefix>.dispatch, .unroutable, .parking, .buckets, .plugin, .ladder.*, .bucket.*)",
			func() { s.spec.Targets = nil },
			func(v string) error {
				var ts topology.Targets
				if err := ts.Decode(v); err != nil {
					return err
				}
				s.spec.Targets = append(s.spec.Targets, ts...)
				return nil
			}),
		listOption("bucket", env("BUCKETS"), "DURATION",
			"fixed delay served by its own queue, one hop and exact, e.g. 30s (repeatable; the variable is comma-separated)",
			func() { s.spec.Buckets = nil },
			func(v string) error {
				var ds topology.Delays
				if err := ds.Decode(v); err != nil {
					return err
				}
				s.spec.Buckets = append(s.spec.Buckets, ds...)
				return nil
			}),
		{name: "unit", env: envLadder + "UNIT", arg: "DURATION", def: ttlbuckets.DefaultUnit.String(),
			set: func(v string) (err error) {
				s.spec.Ladder.Unit, err = topology.ParseLadderUnit(v)
				return err
			},
			usage: "ladder resolution: a whole number of milliseconds, at least 1ms"},
		{name: "radix", env: envLadder + "RADIX", arg: "N", def: strconv.Itoa(ttlbuckets.DefaultRadix),
			usage: "ladder radix: 2, 4, 8, 16, 32 or 64 (levels·(radix-1) queues, at most one hop per level)",
			set:   func(v string) (err error) { s.spec.Ladder.Radix, err = topology.ParseLadderRadix(v); return err }},
		{name: "max-delay", env: envLadder + "MAX", arg: "DURATION", def: ttlbuckets.DefaultMax.String() + " (2^32-1 ms, 49.7 days)",
			set: func(v string) (err error) {
				s.spec.Ladder.Max, err = topology.ParseLadderMax(v)
				return err
			},
			usage: "largest delay the ladder carries: at least one ladder unit"},
		{name: "order", env: envLadder + "ORDER", arg: "ORDER", def: ttlbuckets.ShortestFirst.String(),
			usage: "hop order: shortest-first (only the last, longest hop ends near the due time) or longest-first; publishers must use the same",
			set: func(v string) error {
				o, err := ttlbuckets.ParseOrder(v)
				if err != nil {
					return err
				}
				s.spec.Ladder.Order = o
				return nil
			}},
		{name: "plugin", env: env("PLUGIN"), arg: "MODE", def: string(topology.PluginAuto), set: func(v string) error { s.spec.Plugin = topology.PluginMode(v); return nil },
			usage: "delayed-message plugin exchange: off, auto (declare it when the broker has the plugin) or on (fail when it does not)"},
		{name: "queue-type", env: env("QUEUE_TYPE"), arg: "TYPE", def: string(topology.Quorum), set: func(v string) error { s.spec.QueueType = topology.QueueType(v); return nil },
			usage: "type of every queue declared: quorum (replicated, at-least-once dead-lettering) or classic"},
		listOption("ready-queue", env("READY_QUEUES"), "QUEUE=EXCHANGE:KEY",
			"queue to declare and bind to an exchange with a binding key, e.g. orders.timeouts=orders:order.timeout.# (repeatable; the variable is comma-separated); "+
				"names and key at most 255 bytes, queue and exchange not one of the topology's own names (as for --target)",
			func() { s.spec.ReadyQueues = nil },
			func(v string) error {
				var rs topology.ReadyQueues
				if err := rs.Decode(v); err != nil {
					return err
				}
				s.spec.ReadyQueues = append(s.spec.ReadyQueues, rs...)
				return nil
			}),
		{name: "ready-delivery-limit", env: env("READY_DELIVERY_LIMIT"), arg: "N", def: strconv.Itoa(topology.DefaultReadyDeliveryLimit),
			usage: "x-delivery-limit of quorum ready queues: a message returned (nack/reject with requeue) more often is parked in <prefix>.parking " +
				"(x-death reason delivery_limit); -1: no limit and no dead-letter exchange (ready queues as declared before this option)",
			set: func(v string) (err error) {
				s.spec.ReadyDeliveryLimit, err = topology.ParseReadyDeliveryLimit(v)
				return err
			}},
		{name: "policy-priority", env: env("POLICY_PRIORITY"), arg: "N", def: strconv.Itoa(topology.DefaultPolicyPriority),
			usage: "priority of the policies apply sets (<prefix>.delay-queues, <prefix>.targets): above every other policy matching the topology's queues and target exchanges",
			set:   func(v string) (err error) { s.spec.PolicyPriority, err = topology.ParsePolicyPriority(v); return err }},
		{name: "management-url", env: env("MANAGEMENT_URL"), arg: "URL", set: str(&s.mgmtURL),
			usage: "management API, http://user:password@host:15672/ (optional, recommended): apply sets the topology's policies (user tag policymaker) " +
				"and checks the policies in effect; exact binding states, messages held in quorum queues' dead-letter state"},
		{name: "timeout", env: env("TIMEOUT"), arg: "DURATION", def: "1m", usage: "give up after this long: a positive duration",
			set: func(v string) error {
				if err := dur(&s.timeout, "timeout")(v); err != nil {
					return err
				}
				if s.timeout <= 0 {
					return fmt.Errorf("timeout %q: want a positive duration, e.g. 30s or 5m", v)
				}
				return nil
			}},
		{name: "log-format", env: env("LOG_FORMAT"), arg: "FORMAT", def: "console", usage: "log format on stderr: console or json",
			set: func(v string) error {
				if v != "console" && v != "json" {
					return fmt.Errorf("log format %q: want console or json", v)
				}
				s.logFormat = v
				return nil
			}},
		{name: "log-level", env: env("LOG_LEVEL"), arg: "LEVEL", def: "info", usage: "log level: trace, debug, info, warn, error",
			set: func(v string) error {
				switch v {
				case "trace", "debug", "info", "warn", "error":
					s.logLevel = v
					return nil
				}
				return fmt.Errorf("log level %q: want trace, debug, info, warn or error", v)
			}},
	}
}

// boolOption is a command-specific switch without a variable.
func boolOption(name, usage string, p *bool) option {
	return option{name: name, usage: usage, bool: true, set: func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, not %q", v)
		}
		*p = b
		return nil
	}}
}

// funcValue adapts an option to flag.Value.
type funcValue struct {
	set    func(string) error
	isBool bool
}

func (f funcValue) String() string     { return "" }
func (f funcValue) Set(s string) error { return f.set(s) }
func (f funcValue) IsBoolFlag() bool   { return f.isBool }

// parse applies the defaults, then the variables (through getenv), then the flags of args.
func parse(name string, opts []option, args []string, getenv func(string) string) ([]string, error) {
	for _, o := range opts {
		if o.env == "" {
			continue
		}
		v := getenv(o.env)
		if v == "" {
			continue
		}
		set := o.set
		if o.setEnv != nil {
			set = o.setEnv // the whole comma-separated list; the first flag replaces it
		}
		if err := set(v); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", o.env, v, err)
		}
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, o := range opts {
		fs.Var(funcValue{set: o.set, isBool: o.bool}, o.name, o.usage)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

// printOptions writes the options' help: flag and placeholder, then the meaning, the
// variable and the default on the next line.
func printOptions(w io.Writer, opts []option) {
	for _, o := range opts {
		flagText := "  --" + o.name
		if o.arg != "" {
			flagText += " " + o.arg
		}
		var extra []string
		if o.env != "" {
			extra = append(extra, "env "+o.env)
		}
		if o.def != "" {
			extra = append(extra, "default "+o.def)
		}
		fmt.Fprintf(w, "%s\n        %s", flagText, o.usage)
		if len(extra) > 0 {
			fmt.Fprintf(w, " [%s]", strings.Join(extra, "; "))
		}
		fmt.Fprintln(w)
	}
}
