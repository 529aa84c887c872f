package admin

import (
	"context"
	"net/http"
	"net/url"
	"sort"
)

// TopicPermissionExchanges returns the exchanges of the client's vhost on which user has a
// topic permission (GET /api/topic-permissions/<vhost>/<user>), sorted. RabbitMQ checks a
// publish's routing key (on 4.x also its CC and BCC keys) against the write pattern of such a
// permission, for topic exchanges only, and closes the channel (403 ACCESS_REFUSED) when it
// does not match (rabbit_channel.erl check_topic_authorisation; rabbit_auth_backend_internal
// check_topic_access, which expands {username}, {vhost} and {client_id} in the pattern); an
// exchange without a topic permission allows every key. A user with no topic permission
// gives none (the API answers 404). Reading another user's permissions needs the
// administrator tag. Errors wrap ErrManagement.
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
