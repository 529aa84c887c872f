// Package declare is the rabbitdelay CLI: it declares, checks, inspects, exports and tears
// down rabbitdelay's delay topology (see package topology for what it consists of). The binary
// is built from cmd/rabbitdelay (`go install ./cmd/rabbitdelay`), a call of [Main]; it is not
// named declare, which is a bash builtin. Operators run it once from a
// terminal, a CI/CD job or a Kubernetes job; it is configured by flags or by the same
// AMQPDELAY_* environment variables the amqpdelay client reads (one reader for both:
// delayspec.ReadEnv, which the CLI applies its own variables and then its flags over). A flag
// given on the command line wins over its variable; a repeatable flag given once replaces the
// whole list of its variable. A variable set but empty counts as unset.
//
// # Usage
//
//	rabbitdelay <command> [flags]
//	rabbitdelay --help | rabbitdelay <command> --help
//
// # Commands
//
//	plan      Print every exchange, queue and binding with its arguments, in declaration order
//	          (--output table|json). No connection needed.
//	apply     Declare the plan; print each object it created (bindings: "bound" without
//	          --management-url, since AMQP cannot list bindings) or found in conflict, and one
//	          line counting the unchanged ones (-v or --verbose lists them too). Idempotent: a
//	          second run changes nothing and exits 0. An object that exists with other arguments stops
//	          it with exit code 2 and a message naming the object, the argument, the existing
//	          and the wanted value; nothing is created then. It never deletes an exchange,
//	          queue or binding.
//	          Target exchanges without a type must exist, checked before anything is declared.
//	          With --management-url it sets the three policies <prefix>.delay-queues,
//	          <prefix>.targets and <prefix>.revoked-retention (see package topology, Policies)
//	          and then checks every policy in
//	          effect on the topology: a key that breaks a guarantee (operator policies, or a
//	          policy at or above --policy-priority) is named with its policy, value, object
//	          and effect (early, deletes, drops, stalls, wrong routing), and apply exits 1.
//	          Without it, apply prints the rabbitmqctl set_policy commands to run.
//	          --dry-run checks all of that and declares nothing.
//	status    First every problem found, each with what to do; then the parking queue's
//	          count, one line per ladder level and bucket (queues, messages held, messages in
//	          dead-letter state, consumers, TTL range; --queues: one line per queue), each
//	          target and whether it is bound, each ready queue, the revocation stream, the
//	          policies, and whether the broker has the delayed-message plugin (on RabbitMQ 4.3+,
//	          which cannot load it, that the ladder carries every delay; where it runs, the
//	          plugin exchange's messages_delayed). Exit code 1, naming the state, when the
//	          topology is not declared (none of its own objects exist: status then says how to
//	          declare it and reports nothing about objects that do not exist), any object (or,
//	          with --management-url, policy) is missing, a consumer is attached to a delay
//	          queue, and with --management-url when an existing exchange or queue has another
//	          type, flag or argument than the specification's, messages sit in a queue's
//	          dead-letter state (messages_dlx), a binding on the topology's exchanges or queues
//	          is not in the specification, a policy in effect breaks a guarantee, or a ready
//	          queue is in a requeue loop that no delivery limit ends (topology.RequeueLoopOf:
//	          on RabbitMQ 4.3 basic.nack requeues do not count toward a quorum queue's limit).
//	          A consumer's binding of its own queue to <prefix>.retry by the queue's name is
//	          listed, not an error. --output table|json; --json (the same as --output json)
//	          prints everything in the documented, stable shape of docs/status-json.md
//	          (schema 1).
//	exporter  Serve the topology's state as Prometheus metrics on /metrics (--listen ADDR,
//	          default :9531) until interrupted, read from the management API at every scrape
//	          (--management-url required): messages per ladder level and bucket, messages_dlx,
//	          consumers on delay queues, parking and ready queues, policy problems, leaders
//	          and members per node (package exporter lists them). --per-queue: one series per
//	          delay queue. --timeout bounds each scrape, not the command.
//	export    Print the topology as RabbitMQ definitions JSON (the format of rabbitmqctl
//	          export_definitions) for the URL's vhost or --vhost, for the broker's RabbitMQ
//	          version: asked through the management API (--management-url) or the AMQP
//	          connection's server properties; --rabbitmq-version 3|4|MAJOR.MINOR says it
//	          instead (a broker it cannot reach gets 4.x's, with a warning; 3.x refuses those).
//	          `rabbitmqctl import_definitions` (or POST /api/definitions) gives what apply
//	          declares. With --plugin auto the plugin exchange is included only when the
//	          management API says the broker has the plugin; --plugin on for 4.3+ is refused.
//	          Targets without a type are not included (they must exist).
//	teardown  Delete the delay queues, the parking queue and the topology's exchanges, listing
//	          each as deleted or absent. Refuses (exit 1, nothing deleted) while any of these
//	          queues holds messages, unless --force. Quorum queues' unacknowledged and
//	          dead-letter-state messages are only visible through the management API, so
//	          without --management-url a topology with quorum queues needs --force. Never touches target exchanges; ready
//	          queues only with --ready-queues. --dry-run deletes nothing. Messages already held
//	          by the delayed-message plugin are not removed by deleting its exchange: the plugin
//	          still delivers them when they fall due if an exchange of that name exists then.
//	          Only the specification's objects are deleted; with --management-url the other
//	          objects named like them (an earlier specification's) are listed as left in place.
//
// # Flags and variables
//
//	--url URL                     AMQPDELAY_URL             amqp://guest:guest@localhost:5672/
//	                              broker URL; the vhost is the URL's path; amqps:// for TLS
//	--tls-ca FILE                 AMQPDELAY_TLS_CA          CA certificates (PEM); default system roots
//	--tls-cert FILE               AMQPDELAY_TLS_CERT        client certificate (PEM)
//	--tls-key FILE                AMQPDELAY_TLS_KEY         client key (PEM)
//	--prefix PREFIX               AMQPDELAY_PREFIX          rabbitdelay
//	--target NAME[:TYPE]          AMQPDELAY_TARGETS         (required) repeatable / comma-separated;
//	                              name:type declares the exchange (direct, fanout, topic, headers);
//	                              at most 255 bytes, not a name of the topology's own (<prefix>.dispatch,
//	                              .unroutable, .parking, .buckets, .plugin, .ladder.*, .bucket.*)
//	--bucket DURATION             AMQPDELAY_BUCKETS         none; repeatable / comma-separated, e.g. 30s,5m,1h
//	--unit DURATION               AMQPDELAY_LADDER_UNIT     1ms
//	--radix N                     AMQPDELAY_LADDER_RADIX    16 (2, 4, 8, 16, 32, 64)
//	--max-delay DURATION          AMQPDELAY_LADDER_MAX      2^32-1 ms (49.7 days)
//	--order ORDER                 AMQPDELAY_LADDER_ORDER    shortest-first (or longest-first)
//	--plugin MODE                 AMQPDELAY_PLUGIN          auto (off, auto, on)
//	--queue-type TYPE             AMQPDELAY_QUEUE_TYPE      quorum (or classic)
//	--ready-queue Q=EXCHANGE:KEY  AMQPDELAY_READY_QUEUES    none; repeatable / comma-separated;
//	                              names and key at most 255 bytes, names not the topology's own
//	--ready-delivery-limit N      AMQPDELAY_READY_DELIVERY_LIMIT  20; x-delivery-limit of quorum ready
//	                              queues (then parked); -1: none, and no dead-letter exchange
//	--policy-priority N           AMQPDELAY_POLICY_PRIORITY 1000000; priority of the topology's policies
//	--shards N                    AMQPDELAY_SHARDS          1; shards of the ladder (1-16), each queue's
//	                              copies placed on different nodes by apply (list every node in --url)
//	--management-url URL          AMQPDELAY_MANAGEMENT_URL  none; http://user:password@host:15672/
//	--timeout DURATION            AMQPDELAY_TIMEOUT         1m
//	--log-format FORMAT           AMQPDELAY_LOG_FORMAT      console (or json)
//	--log-level LEVEL             AMQPDELAY_LOG_LEVEL       info
//
// Command flags: plan and status --output table|json (status also --json and --queues); apply
// --dry-run, -v/--verbose; export --vhost VHOST, --rabbitmq-version VERSION; teardown --force, --ready-queues, --dry-run; exporter
// --listen ADDR, --per-queue.
//
// Results go to stdout; logs (zerolog) to stderr. A value that does not parse, or cannot be
// right, is refused (exit 2) naming the flag or the variable it came from, with what to write
// instead: `--radix 7: want 2, 4, 8, 16, 32 or 64`, `AMQPDELAY_LADDER_RADIX="7": ...`. An
// explicit 0 for --unit, --radix or --max-delay (or their variables) is refused rather than
// taken for the default; --timeout must be positive. Passwords from URLs never appear in
// output: URLs are shown with the password replaced by ***, and a URL that does not parse (an
// unescaped # ? / % or space in the password) without its user information.
//
// # Exit codes
//
// The table of docs/operations.md, which TestExitCodesDocumented holds to the constants:
//
//	0  success; for status: no problem found
//	1  runtime failure: broker unreachable or refusing (password, vhost, permissions), the
//	   topology not declared, incomplete or unhealthy (status), a policy in effect that
//	   breaks a guarantee (apply, status), a requeue loop on a ready queue (status), the
//	   plugin required (--plugin on) but missing, teardown refused because queues hold
//	   messages
//	2  usage: unknown command or flag, invalid value or specification, a missing target
//	   exchange (one given without a type that does not exist), or a topology conflict (an
//	   object exists with other arguments)
//
// # Permissions
//
// apply needs configure permission on names starting with the prefix (and on targets it
// declares and ready queues), write permission on the target exchanges (exchange-to-exchange
// bindings) and read on the exchanges it binds from. The plugin probe (mode auto or on, without
// --management-url) declares and deletes a temporary exchange <prefix>.plugin-probe.<random>.
// status declares nothing (passive declarations only), except that probe. Setting and deleting
// the topology's policies (apply and teardown with --management-url) needs the user tag
// policymaker (or administrator); reading them, the tag monitoring.
package declare
