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
// plan, apply, status, export and teardown, and rebalance, exporter, schedules and schedule:
// `rabbitdelay --help` lists them and docs/operations.md describes each in full.
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
//	   queue or the parking queue, the plugin required but missing, teardown refused
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
