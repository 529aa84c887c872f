// Package topology declares and checks rabbitdelay's delay topology from Go, for a service that
// declares its own topology when it starts: the work of `rabbitdelay apply` and `rabbitdelay
// status`, with the specification given as a [Spec] instead of AMQPDELAY_* variables.
//
// RabbitMQ sets policies only through its management API (https://www.rabbitmq.com/docs/policies),
// so both functions need its URL. [NewManagement] gives a Publisher the same API's checks
// (amqpdelay.Config.Management).
package topology

import (
	"cmp"
	"context"
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// Spec is the delay topology to declare, one field per AMQPDELAY_* variable of `rabbitdelay
// apply` (docs/configuration.md gives each one's meaning, range and default; Buckets in whole
// ms). Zero fields take their defaults; Apply and Check validate it.
type Spec = delayspec.Spec

// Target is a target exchange of a [Spec]: Name, and Type ("topic", "direct", ...) for Apply to
// declare it, or "" for an exchange that exists already.
type Target = delayspec.Target

// ReadyQueue is a queue a [Spec] declares (Queue) and binds to Exchange with BindingKey.
type ReadyQueue = delayspec.ReadyQueue

// Apply declares spec's delay topology in conn's virtual host as `rabbitdelay apply` does: the
// missing exchanges, queues and bindings, and the policies, through the management API at
// managementURL (http://user:password@host:15672); it deletes nothing. The error names, with its
// fix, a bad setting, a refused or conflicting object, a missing target exchange, or a policy
// that makes delays early or drops messages. ctx bounds the call; the connection stays open.
func Apply(ctx context.Context, conn *amqp.Connection, spec Spec, managementURL string) error {
	p, m, err := prepare(conn, spec, managementURL)
	if err != nil {
		return err
	}
	_, err = admin.Apply(ctx, conn, p, admin.ApplyOptions{Management: m})
	return err
}

// Check returns nil when spec's delay topology is declared in conn's virtual host and nothing
// makes it lose, stall or hurry a message, as when `rabbitdelay status` reports OK: the objects
// have the planned arguments, the policies are safe, and no queue holds dead-lettering messages
// at two management API readings 6 s apart (waited only when the first shows some); else the
// error lists every problem with its fix. It changes nothing; ctx bounds it, wait included.
func Check(ctx context.Context, conn *amqp.Connection, spec Spec, managementURL string) error {
	p, m, err := prepare(conn, spec, managementURL)
	if err != nil {
		return err
	}
	_, err = admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
	return err
}

// NewManagement returns the management API checks (managementURL
// http://user:password@host:15672, vhost "/" when empty) for amqpdelay.Config.Management. It
// does no I/O; the error names a URL that does not parse, without its password.
func NewManagement(managementURL, vhost string) (amqpdelay.ManagementCheck, error) {
	m, err := admin.NewManagement(managementURL, cmp.Or(vhost, "/"))
	if err != nil {
		return nil, err // not a nil *admin.Management in a non-nil interface
	}
	return m, nil
}

// prepare checks the arguments and builds the plan and the management client (check err first).
func prepare(conn *amqp.Connection, spec delayspec.Spec, managementURL string) (*admin.Plan, *admin.Management, error) {
	if conn == nil {
		return nil, nil, errors.New("topology: conn is nil: pass an open AMQP connection to the broker")
	}
	if managementURL == "" {
		return nil, nil, errors.New("topology: managementURL is empty: RabbitMQ sets policies only through its management API; " +
			"pass its URL, e.g. http://user:password@host:15672")
	}
	p, err := admin.NewPlan(spec)
	if err != nil {
		return nil, nil, err
	}
	m, err := admin.NewManagement(managementURL, cmp.Or(conn.Config.Vhost, "/"))
	return p, m, err
}
