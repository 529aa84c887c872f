package topology

import "github.com/delaykit/rabbitdelay/delayspec"

// The specification, the naming rule and the AMQPDELAY_* reader live in package delayspec,
// which the client packages import instead of this one. These names stay here so that code of
// the administration side reads as before.

type (
	// Spec is [delayspec.Spec].
	Spec = delayspec.Spec
	// Names is [delayspec.Names].
	Names = delayspec.Names
	// PluginMode is [delayspec.PluginMode].
	PluginMode = delayspec.PluginMode
	// QueueType is [delayspec.QueueType].
	QueueType = delayspec.QueueType
	// Target is [delayspec.Target].
	Target = delayspec.Target
	// Targets is [delayspec.Targets].
	Targets = delayspec.Targets
	// ReadyQueue is [delayspec.ReadyQueue].
	ReadyQueue = delayspec.ReadyQueue
	// ReadyQueues is [delayspec.ReadyQueues].
	ReadyQueues = delayspec.ReadyQueues
	// Delays is [delayspec.Delays].
	Delays = delayspec.Delays
	// Env is [delayspec.Env].
	Env = delayspec.Env
	// ValueError is [delayspec.ValueError].
	ValueError = delayspec.ValueError
	// DeliveryLimit is [delayspec.DeliveryLimit].
	DeliveryLimit = delayspec.DeliveryLimit
)

// The constants of package delayspec.
const (
	DefaultPrefix             = delayspec.DefaultPrefix
	PluginAuto                = delayspec.PluginAuto
	PluginOff                 = delayspec.PluginOff
	PluginOn                  = delayspec.PluginOn
	Quorum                    = delayspec.Quorum
	Classic                   = delayspec.Classic
	MaxShards                 = delayspec.MaxShards
	DefaultReadyDeliveryLimit = delayspec.DefaultReadyDeliveryLimit
	NoReadyDeliveryLimit      = delayspec.NoReadyDeliveryLimit
	DefaultPolicyPriority     = delayspec.DefaultPolicyPriority
	MaxNameLen                = delayspec.MaxNameLen
	EnvPrefix                 = delayspec.EnvPrefix
)

// ErrInvalidSpec is [delayspec.ErrInvalidSpec].
var ErrInvalidSpec = delayspec.ErrInvalidSpec

// BrokerReserved is [delayspec.BrokerReserved].
func BrokerReserved(name string) bool { return delayspec.BrokerReserved(name) }

// ForeignPrefixes is [delayspec.ForeignPrefixes].
func ForeignPrefixes(name, own string, queue, parking bool) []string {
	return delayspec.ForeignPrefixes(name, own, queue, parking)
}

// ReadEnv is [delayspec.ReadEnv].
func ReadEnv(dst any) error { return delayspec.ReadEnv(dst) }

// prefixOf is n's prefix, DefaultPrefix when empty.
func prefixOf(n Names) string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}
