package declare

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// variables are the AMQPDELAY_* variables declare reads: the library's and its own. The flags
// set the same fields with the same Decode methods, so a flag and its variable take the same
// values.
type variables struct {
	delayspec.Env
	ManagementURL string    `envconfig:"AMQPDELAY_MANAGEMENT_URL"`
	Timeout       timeout   `envconfig:"AMQPDELAY_TIMEOUT"`
	LogFormat     logFormat `envconfig:"AMQPDELAY_LOG_FORMAT"`
	LogLevel      logLevel  `envconfig:"AMQPDELAY_LOG_LEVEL"`
}

// defaultTimeout bounds a whole command when AMQPDELAY_TIMEOUT and --timeout are unset.
const defaultTimeout = time.Minute

// timeout is a positive duration; 0 means defaultTimeout.
type timeout time.Duration

func (t *timeout) Decode(s string) error {
	d, err := time.ParseDuration(s)
	if s != "" && (err != nil || d <= 0) {
		return errors.New("want a positive duration, e.g. 30s or 5m")
	}
	*t = timeout(d)
	return nil
}

type logFormat string // console ("") or json

func (f *logFormat) Decode(s string) error {
	return oneOf(f, s, "want console (the default) or json", "console", "json")
}

type logLevel string // a zerolog level name; "" means info

func (l *logLevel) Decode(s string) error {
	return oneOf(l, s, "want trace, debug, info (the default), warn or error", "trace", "debug", "info", "warn", "error")
}

// oneOf sets *dst to s when s is "" or one of ok, else returns want.
func oneOf[T ~string](dst *T, s, want string, ok ...string) error {
	if s != "" && !slices.Contains(ok, s) {
		return errors.New(want)
	}
	*dst = T(s)
	return nil
}

type settings struct {
	vars                                                  variables // the variables, then the flags over them
	exportVersion                                         string    // export --rabbitmq-version ("": ask the broker)
	output                                                string
	vhost                                                 string
	listen                                                string
	dryRun, verbose, force, readyQueues, perQueue, queues bool
}

type option struct {
	name  string
	short string // one-letter alias, "" when none
	env   string // "" when none
	arg   string // placeholder in the help, "" for booleans
	def   string // default shown in the help
	usage string
	set   func(string) error
	bool  bool
}

// listOption is a repeatable flag over a list variable: the first flag given replaces the
// variable's list, later ones add to it; each may itself be comma-separated.
func listOption[L ~[]E, E any, P interface {
	*L
	Decode(string) error
}](name, env, arg, usage string, list *L) option {
	flagSeen := false
	return option{name: name, env: env, arg: arg, usage: usage,
		set: func(v string) error {
			var more L
			if err := P(&more).Decode(v); err != nil {
				return err
			}
			if !flagSeen {
				*list, flagSeen = nil, true
			}
			*list = append(*list, more...)
			return nil
		}}
}

func commonOptions(s *settings) []option {
	str := func(p *string) func(string) error { return func(v string) error { *p = v; return nil } }
	v := &s.vars
	env := func(n string) string { return delayspec.EnvPrefix + "_" + n }
	return []option{
		{name: "url", env: env("URL"), arg: "URL", def: amqpconn.DefaultURL, set: str(&v.URL),
			usage: "broker URL, amqp:// or amqps://; the vhost is the URL's path (%2F for \"/\"); or the comma-separated URLs of one cluster's nodes"},
		{name: "tls-ca", env: env("TLS_CA"), arg: "FILE", set: str(&v.TLSCA),
			usage: "PEM file of CA certificates to verify the broker with (amqps:// only; default: system roots)"},
		{name: "tls-cert", env: env("TLS_CERT"), arg: "FILE", set: str(&v.TLSCert),
			usage: "PEM client certificate (amqps:// only; with --tls-key)"},
		{name: "tls-key", env: env("TLS_KEY"), arg: "FILE", set: str(&v.TLSKey),
			usage: "PEM key of the client certificate"},
		{name: "prefix", env: env("PREFIX"), arg: "PREFIX", def: delayspec.DefaultPrefix, set: str(&v.Prefix),
			usage: "name prefix of every object (<prefix>.dispatch, <prefix>.ladder.LL.DD, ...); letters, digits and . _ - :"},
		listOption("target", env("TARGETS"), "EXCHANGE[:TYPE]",
			"target exchange delayed messages are finally routed through (repeatable; the variable is comma-separated); "+
				"it must exist, unless given as name:type (direct, fanout, topic, headers), which declares it durable; "+
				"at most 255 bytes, not one of the topology's own names (<prefix>.dispatch, .unroutable, .parking, .buckets, .plugin, .ladder.*, .bucket.*)",
			&v.Targets),
		listOption("bucket", env("BUCKETS"), "DURATION",
			"fixed delay served by its own queue, one hop and exact, e.g. 30s (repeatable; the variable is comma-separated)",
			&v.Buckets),
		{name: "unit", env: env("LADDER_UNIT"), arg: "DURATION", def: ttlbuckets.DefaultUnit.String(), set: v.LadderUnit.Decode,
			usage: "ladder resolution: a whole number of milliseconds, at least 1ms"},
		{name: "radix", env: env("LADDER_RADIX"), arg: "N", def: strconv.Itoa(ttlbuckets.DefaultRadix), set: v.LadderRadix.Decode,
			usage: "ladder radix: 2, 4, 8, 16, 32 or 64 (levels·(radix-1) queues plus last-hop and first-hop queues, at most one hop per level; top-split: two at the highest)"},
		{name: "max-delay", env: env("LADDER_MAX"), arg: "DURATION", def: ttlbuckets.DefaultMax.String() + " (2^32-1 ms, 49.7 days)", set: v.LadderMax.Decode,
			usage: "largest delay the ladder carries: at least one ladder unit"},
		{name: "order", env: env("LADDER_ORDER"), arg: "ORDER", def: ttlbuckets.TopSplit.String(), set: v.LadderOrder.Decode,
			usage: "hop order: top-split (part of the longest hop first, so a publish costs the broker little; then shortest first; the rest of it last, so only one hop ends near the due time), shortest-first (only the last, longest hop ends near the due time), longest-first, or top-first (the longest hop first, then shortest first); publishers follow what apply records"},
		{name: "plugin", env: env("PLUGIN"), arg: "MODE", def: string(delayspec.PluginAuto), set: v.Plugin.Decode,
			usage: "delayed-message plugin exchange: off, auto (declare it when the broker has the plugin) or on (fail when it does not)"},
		{name: "queue-type", env: env("QUEUE_TYPE"), arg: "TYPE", def: string(delayspec.Quorum), set: v.QueueType.Decode,
			usage: "type of every queue declared: quorum (replicated, at-least-once dead-lettering) or classic"},
		listOption("ready-queue", env("READY_QUEUES"), "QUEUE=EXCHANGE:KEY",
			"queue to declare and bind to an exchange with a binding key, e.g. orders.timeouts=orders:order.timeout.# (repeatable; the variable is comma-separated); "+
				"names and key at most 255 bytes, queue and exchange not one of the topology's own names (as for --target)",
			&v.ReadyQueues),
		{name: "ready-delivery-limit", env: env("READY_DELIVERY_LIMIT"), arg: "N", def: strconv.Itoa(delayspec.DefaultReadyDeliveryLimit),
			set: v.ReadyDeliveryLimit.Decode,
			usage: "x-delivery-limit of quorum ready queues: a message returned (nack/reject with requeue) more often is parked in <prefix>.parking " +
				"(x-death reason delivery_limit); -1: no limit and no dead-letter exchange (for ready queues that exist with plain arguments)"},
		{name: "policy-priority", env: env("POLICY_PRIORITY"), arg: "N", def: strconv.Itoa(delayspec.DefaultPolicyPriority), set: v.PolicyPriority.Decode,
			usage: "priority of the three policies apply sets (<prefix>.delay-queues, <prefix>.targets, <prefix>.revoked-retention): above every other policy matching the topology's queues and target exchanges"},
		{name: "shards", env: env("SHARDS"), arg: "N", def: "1", set: v.Shards.Decode,
			usage: fmt.Sprintf("shards of the ladder, 1 to %d: a burst due at once leaves from N queues, and apply places the shards of each queue on different nodes "+
				"(list every node in --url); publishers must use the same", delayspec.MaxShards)},
		{name: "management-url", env: env("MANAGEMENT_URL"), arg: "URL", set: str(&v.ManagementURL),
			usage: "management API, http://user:password@host:15672/ (optional, recommended): apply sets the topology's policies (user tag policymaker) " +
				"and checks the policies in effect; exact binding states, messages held in quorum queues' dead-letter state"},
		{name: "timeout", env: env("TIMEOUT"), arg: "DURATION", def: defaultTimeout.String(), set: v.Timeout.Decode,
			usage: "give up after this long: a positive duration"},
		{name: "log-format", env: env("LOG_FORMAT"), arg: "FORMAT", def: "console", set: v.LogFormat.Decode,
			usage: "log format on stderr: console or json"},
		{name: "log-level", env: env("LOG_LEVEL"), arg: "LEVEL", def: "info", set: v.LogLevel.Decode,
			usage: "log level: trace, debug, info, warn, error"},
	}
}

// boolOption is a command-specific switch without a variable that calls set with its value.
func boolOption(name, usage string, set func(bool)) option {
	return option{name: name, usage: usage, bool: true, set: func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("want true or false")
		}
		set(b)
		return nil
	}}
}

func flagOf(p *bool) func(bool) { return func(b bool) { *p = b } }

// parse reads the variables into s.vars, then the flags of args over them. A value that does
// not parse is a *delayspec.ValueError naming the variable or the flag.
func parse(name string, opts []option, args []string, s *settings) ([]string, error) {
	envErr := delayspec.ReadEnv(&s.vars)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var setErr error
	for _, o := range opts {
		set := func(val string) error {
			if err := o.set(val); err != nil {
				setErr = &delayspec.ValueError{Name: "--" + o.name, Value: val, Err: err}
				return setErr
			}
			return nil
		}
		define := fs.Func
		if o.bool {
			define = fs.BoolFunc
		}
		for _, n := range []string{o.name, o.short} {
			if n != "" {
				define(n, o.usage, set)
			}
		}
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, err
	case envErr != nil:
		return nil, envErr
	case setErr != nil:
		return nil, setErr
	case err != nil:
		return nil, flagError(err)
	}
	return fs.Args(), nil
}

// flagError rewrites the flag package's messages with the flag as the help writes it.
func flagError(err error) error {
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return fmt.Errorf("unknown flag -%s", f)
	}
	if f, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return fmt.Errorf("-%s needs a value", f)
	}
	return err
}

func printOptions(w io.Writer, opts []option) {
	for _, o := range opts {
		flagText := strings.TrimSuffix("  --"+o.name+" "+o.arg, " ")
		if o.short != "" {
			flagText = "  -" + o.short + "," + flagText[1:]
		}
		var extra []string
		for _, e := range [][2]string{{"env ", o.env}, {"default ", o.def}} {
			if e[1] != "" {
				extra = append(extra, e[0]+e[1])
			}
		}
		fmt.Fprintf(w, "%s\n        %s", flagText, o.usage)
		if len(extra) > 0 {
			fmt.Fprintf(w, " [%s]", strings.Join(extra, "; "))
		}
		fmt.Fprintln(w)
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

func jsonOption(s *settings) option {
	return boolOption("json", "the same as --output json: the documented JSON shape (schema 1)", func(b bool) {
		if b {
			s.output = "json"
		}
	})
}
