package plugin

import "fmt"

// ErrUnsupported returns an error saying that RabbitMQ rabbitmqVersion ("4.3.6" or "4.3")
// cannot load the plugin, or nil when it can or the version is not known: the plugin stores
// its messages in Mnesia, which RabbitMQ 4.3 removed. Callers wrap it with what to do instead.
func ErrUnsupported(rabbitmqVersion string) error {
	var major, minor int
	if _, err := fmt.Sscanf(rabbitmqVersion, "%d.%d", &major, &minor); err != nil {
		return nil
	}
	if major > 4 || major == 4 && minor >= 3 {
		return fmt.Errorf("RabbitMQ %s cannot load the delayed-message plugin (%s): it stores its messages in Mnesia, "+
			"which RabbitMQ 4.3 removed", rabbitmqVersion, PluginName)
	}
	return nil
}
