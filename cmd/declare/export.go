package declare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/plugin"
)

var exportCommand = command{name: "export", summary: "print the topology as RabbitMQ definitions JSON for the broker's version",
	help: "Prints the topology in the format of `rabbitmqctl export_definitions`, for `rabbitmqctl\n" +
		"import_definitions` or the management API (POST /api/definitions): importing it gives what apply declares.\n" +
		"The definitions depend on the RabbitMQ that imports them (3.x refuses 4.x's delivery-limit -1): export asks\n" +
		"the broker its version (management API, else AMQP); --rabbitmq-version says it instead, and must when the\n" +
		"broker cannot be reached (else 4 is assumed, with a warning). --plugin auto includes the plugin exchange only\n" +
		"when the management API says the broker has the plugin; --plugin on includes it (refused on RabbitMQ 4.3+).\n" +
		"Target exchanges given without a type are not included: they must exist before the import.",
	extra: func(s *settings) []option {
		return []option{{name: "vhost", arg: "VHOST", def: "the URL's vhost, or /", usage: "vhost written into the definitions",
			set: func(v string) error { s.vhost = v; return nil }},
			{name: "rabbitmq-version", arg: "VERSION", def: "the broker's", usage: "version of the RabbitMQ that imports the definitions " +
				"(3, 4, or e.g. 3.10 or 4.3.6): skips asking the broker",
				set: func(v string) error {
					if major, _, ok := admin.ParseVersion(v); !ok || major < 3 || major > 4 {
						return errors.New("want the version of the RabbitMQ that imports the definitions: 3 or 4, or " +
							"MAJOR.MINOR such as 3.10 or 4.3")
					}
					s.exportVersion = v
					return nil
				}}}
	}, run: cmdExport}

func cmdExport(ctx context.Context, e *invocation) error {
	p, err := e.plan()
	if err != nil {
		return err
	}
	vhost := e.s.vhost
	if vhost == "" {
		// A URL that does not parse must not become "/" silently.
		if err := e.s.vars.Conn().Validate(); err != nil {
			return usageError{fmt.Errorf("%w (export takes the vhost from the URL, or from --vhost)", err)}
		}
		vhost = e.vhost()
	}
	m, err := e.management()
	if err != nil {
		return err
	}
	version := e.s.exportVersion
	if version == "" {
		var from string
		version, from, err = e.askVersion(ctx, m)
		if err != nil {
			e.log.Warn().Err(err).Msg("export: cannot ask the broker its version, so the definitions are for RabbitMQ 4.x; " +
				"RabbitMQ 3.x refuses them (\"-1 is not a valid delivery limit\") and keeps the vhost the import created: " +
				"pass --rabbitmq-version 3 for a 3.x broker")
			version = "4"
		} else {
			e.log.Info().Str("rabbitmq_version", version).Str("from", from).Msg("export: definitions for the broker's version")
		}
	}
	major, _, _ := admin.ParseVersion(version)
	noPlugin := plugin.ErrUnsupported(version)
	switch p.Spec.Plugin {
	case delayspec.PluginOn:
		if noPlugin != nil {
			return fmt.Errorf("%w: --plugin on, but %v, and an import with an exchange of type %s fails there: use --plugin auto "+
				"or off (the ladder and buckets carry every delay)", admin.ErrPluginUnavailable, noPlugin, admin.PluginExchangeType)
		}
	case delayspec.PluginAuto:
		avail := false
		if m != nil && noPlugin == nil {
			if avail, err = admin.ProbePluginManagement(ctx, m); err != nil {
				e.log.Warn().Err(err).Msg("export: cannot ask the management API whether the broker has the delayed-message plugin: the plugin exchange is left out")
			}
		}
		if !avail {
			e.log.Info().Msg("export: plugin auto: the plugin exchange is left out (the broker lacks the plugin, or export cannot tell " +
				"without --management-url; --plugin on includes it)")
			p = p.WithoutPlugin()
		}
	}
	if len(p.Existing) > 0 {
		e.log.Info().Strs("exchanges", p.Existing).Msg("not in the export: these exchanges must exist before the import")
	}
	out, err := admin.Export(p.ForBroker(major), vhost)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(out)
	return err
}

// versionTimeout bounds export's question about the broker's version (an unreachable broker).
const versionTimeout = 10 * time.Second

// askVersion asks the broker its version: the management API when m is set, else (or when
// that fails) the AMQP server properties; from says which answered.
func (e *invocation) askVersion(ctx context.Context, m *admin.Management) (version, from string, err error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	var errs []error
	if m != nil {
		v, err := m.Version(ctx)
		if err == nil {
			return v, "management API", nil
		}
		errs = append(errs, err)
	}
	conn, err := e.dial(ctx)
	if err != nil {
		return "", "", errors.Join(append(errs, err)...)
	}
	defer conn.Close()
	if v := admin.ServerVersion(conn); v != "" {
		return v, "AMQP server properties", nil
	}
	return "", "", errors.Join(append(errs, errors.New("the broker's AMQP server properties name no version"))...)
}
