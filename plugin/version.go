package plugin

import "fmt"

// ErrUnsupported returns an error saying that RabbitMQ rabbitmqVersion (a server's "version",
// such as "4.3.6", or a bare major.minor such as "4.3") cannot load the plugin, or nil when it
// can or the version is not known. The plugin's last release supports RabbitMQ up to 4.2: it
// stores its messages in Mnesia, which RabbitMQ 4.3 removed. Callers wrap the error with what
// the user asked for and what to do instead.
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
