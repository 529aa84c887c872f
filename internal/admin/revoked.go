package admin

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// RoleRevoked is the revocation stream ([Names.Revoked]), where Publisher.Revoke records which
// delayed messages must not reach a handler (https://www.rabbitmq.com/docs/streams). Nothing is
// bound to it: records go through the default exchange.
const RoleRevoked Role = "revoked"

// revokedMaxAge is the stream's retention as a max-age value: whole hours, "<n>h".
func revokedMaxAge(s delayspec.Spec) string {
	return fmt.Sprintf("%dh", int64(s.RevocationRetention()/time.Hour))
}

func (p *Plan) addRevoked() {
	args := amqp.Table{"x-queue-type": "stream", "x-max-age": revokedMaxAge(p.Spec)}
	p.Queues = append(p.Queues, Queue{Name: p.Names.Revoked(), Args: args, Role: RoleRevoked, Level: -1, Digit: -1, Slot: -1})
}
