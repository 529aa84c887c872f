// Package declare is the rabbitdelay CLI: it declares, checks, inspects, exports and tears
// down rabbitdelay's delay topology (see package topology for what it consists of). The binary
// is built from cmd/rabbitdelay (`go install ./cmd/rabbitdelay`), a call of [Main]; it is not
// named declare, which is a bash builtin. Operators run it once from a terminal, a CI/CD job or
// a Kubernetes job.
//
// It is configured by flags or by the AMQPDELAY_* environment variables the clients read (one
// reader for both, delayspec.ReadEnv); docs/configuration.md lists them. A flag wins over its
// variable; a repeatable flag given once replaces the whole list of its variable; a variable
// set but empty counts as unset.
//
// # Usage
//
//	rabbitdelay <command> [flags]
//	rabbitdelay --help | rabbitdelay <command> --help
//
// # Commands
//
// docs/operations.md describes each in full.
//
//	plan      Print every exchange, queue and binding with its arguments, in declaration
//	          order. No connection needed.
//	apply     Declare the plan, idempotently; an object that exists with other arguments
//	          stops it (exit 2) before anything is created. It never deletes anything. With
//	          --management-url it sets the topology's policies and checks every policy in
//	          effect (a key that breaks a guarantee: exit 1); without it, it prints the
//	          rabbitmqctl set_policy commands to run. --dry-run declares nothing.
//	status    Every problem found, each with what to do, then the state of every object.
//	          Exit 1 when the topology is missing, incomplete or unhealthy. --json prints the
//	          stable shape of docs/status-json.md.
//	exporter  Serve the topology's state as Prometheus metrics on /metrics (--listen ADDR),
//	          read from the management API at every scrape (package exporter lists them).
//	export    Print the topology as RabbitMQ definitions JSON (rabbitmqctl
//	          import_definitions format) for the broker's RabbitMQ version.
//	teardown  Delete the topology's queues and exchanges (never target exchanges; ready queues
//	          only with --ready-queues). Refuses (exit 1, nothing deleted) while a queue holds
//	          messages, unless --force.
//
// Results go to stdout; logs (zerolog) to stderr. A value that does not parse, or cannot be
// right, is refused (exit 2) naming the flag or the variable it came from, with what to write
// instead. Passwords from URLs never appear in output.
//
// # Exit codes
//
//	0  success; for status: no problem found
//	1  runtime failure: broker unreachable or refusing, the topology not declared, incomplete
//	   or unhealthy, a policy in effect that breaks a guarantee, a requeue loop on a ready
//	   queue, the plugin required but missing, teardown refused
//	2  usage: unknown command or flag, invalid value or specification, a missing target
//	   exchange, or a topology conflict (an object exists with other arguments)
//
// # Permissions
//
// apply needs configure permission on names starting with the prefix (and on targets it
// declares and ready queues), write permission on the target exchanges and read on the
// exchanges it binds from. The plugin probe (without --management-url) declares and deletes a
// temporary exchange <prefix>.plugin-probe.<random>. status declares nothing but that probe.
// Setting and deleting the topology's policies needs the user tag policymaker (or
// administrator); reading them, the tag monitoring.
package declare
