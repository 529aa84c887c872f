// Package declare is the rabbitdelay CLI: it declares, checks, inspects, exports and tears
// down rabbitdelay's delay topology (see package topology). The binary, cmd/rabbitdelay, is a
// call of [Main]; it is not named declare, which is a bash builtin.
//
//	rabbitdelay <command> [flags]
//	rabbitdelay --help | rabbitdelay <command> --help
//
// It reads flags and the AMQPDELAY_* variables the clients read (one reader, delayspec.ReadEnv;
// docs/configuration.md): a flag wins over its variable, a repeatable flag replaces its
// variable's whole list, and a variable set but empty counts as unset. docs/operations.md
// describes each command and the exit codes: 0 success, 1 runtime failure or a problem found,
// 2 usage. Results go to stdout, logs (zerolog) to stderr; passwords never appear in output.
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
