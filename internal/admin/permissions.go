package admin

import (
	"context"
	"net/http"
	"net/url"
	"sort"
)

// TopicPermissionExchanges returns the exchanges of the client's vhost on which user has a
// topic permission (GET /api/topic-permissions/<vhost>/<user>), sorted: RabbitMQ closes the
// channel (403) when a publish's routing key does not match its write pattern on a topic
// exchange (rabbit_channel check_topic_authorisation). Another user's need the administrator
// tag. Errors wrap ErrManagement.
func (m *Management) TopicPermissionExchanges(ctx context.Context, user string) ([]string, error) {
	var raw []struct {
		Exchange string `json:"exchange"`
	}
	err := m.get(ctx, "api/topic-permissions/"+url.PathEscape(m.vhost)+"/"+url.PathEscape(user), &raw)
	if httpStatus(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(raw))
	for _, tp := range raw {
		out = append(out, tp.Exchange)
	}
	sort.Strings(out)
	return out, nil
}
