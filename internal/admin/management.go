package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// ErrManagement wraps every error from the management HTTP API.
var ErrManagement = errors.New("topology: management API")

// Management reads what AMQP cannot see from RabbitMQ's management HTTP API
// (https://www.rabbitmq.com/docs/management#http-api): the bindings of a vhost (so Apply can
// tell a created binding from an unchanged one), the messages held in quorum queues'
// dead-letter state (messages_dlx), the broker's exchange types, and the policies in effect
// ([Management.PolicyProblems]). It writes only the topology's own policies, when Apply
// ([Management.SetPolicies]) or Teardown ([Management.DeletePolicies]) is given one; that needs
// a user with the policymaker (or administrator) tag.
type Management struct {
	base  *url.URL // without user information
	user  *url.Userinfo
	vhost string
	// Client is the HTTP client; nil means http.DefaultClient. Each request is bounded by its
	// context, and by requestTimeout when the context has no deadline.
	Client *http.Client
}

// NewManagement returns a client of the management API at rawURL
// (http://user:password@host:15672/, the credentials being the broker user's) for vhost
// ("/" when empty). It returns an error wrapping ErrManagement when rawURL does not parse or is
// not http(s); the error never contains the password.
func NewManagement(rawURL, vhost string) (*Management, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || amqpconn.MisplacedAt(rawURL) {
		// Never the parser's message: net/url quotes a prefix of the URL that can end inside
		// the password.
		shown := "URL"
		if strings.Contains(rawURL, "://") {
			shown = fmt.Sprintf("URL %q", amqpconn.RedactUserinfo(rawURL))
		}
		return nil, fmt.Errorf("%w: %s is not a valid management API URL: want \"http://\" or \"https://\", then "+
			"user:password@host:15672/ (percent-encode special characters such as # ? / @ : %% and space in the "+
			"user name and password)", ErrManagement, shown)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/api") {
		// The API's paths are appended to the URL's: a query or fragment would end up in the
		// middle of every request (and in error messages), and ".../api/" doubles "api".
		return nil, fmt.Errorf("%w: management API URL %q: give the root of the management UI, without a query, fragment "+
			"or /api path (e.g. http://user:password@host:15672/, or http://user:password@host/rabbitmq/ behind a proxy path)",
			ErrManagement, amqpconn.Redact((&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()))
	}
	if vhost == "" {
		vhost = "/"
	}
	m := &Management{user: u.User, vhost: vhost}
	u.User = nil
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	m.base = u
	return m, nil
}

// advice is what to do about an HTTP status the management API answered with, or "".
func (m *Management) advice(status int) string {
	user := "the user"
	if m.user != nil && m.user.Username() != "" {
		user = fmt.Sprintf("user %q", m.user.Username())
	}
	switch status {
	case http.StatusUnauthorized:
		if m.user == nil || m.user.Username() == "" {
			return " (the management URL has no user: give one with the monitoring or management tag, " +
				"http://user:password@host:15672/, or leave the management URL out)"
		}
		// RabbitMQ answers 401 both to a wrong password and to a user without a management
		// tag ("Not management user").
		return fmt.Sprintf(" (check the password of %s in the URL, and that %s has a management tag: "+
			"`rabbitmqctl set_user_tags <user> monitoring` suffices; or leave the management URL out)", user, user)
	case http.StatusForbidden:
		return fmt.Sprintf(" (%s lacks permissions on vhost %q: `rabbitmqctl set_permissions -p <vhost> <user> ...`)", user, m.vhost)
	case http.StatusNotFound:
		return fmt.Sprintf(" (vhost %q or the object does not exist, or the URL is not the management API's root)", m.vhost)
	}
	return ""
}

// VHost returns the vhost the client reads.
func (m *Management) VHost() string { return m.vhost }

func (m *Management) get(ctx context.Context, path string, out any) error {
	return m.do(ctx, http.MethodGet, path, nil, out)
}

// requestTimeout bounds a management API request whose context has no deadline. A context
// with one bounds the request alone (the CLI's AMQPDELAY_TIMEOUT), however long: a busy broker
// can take more than 30 s to answer a policy change.
var requestTimeout = 30 * time.Second

// do calls the management API: method on path (relative to the base URL), with body sent as
// JSON when not nil, decoding a JSON answer into out when not nil. 2xx answers succeed.
func (m *Management) do(ctx context.Context, method, path string, body, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	full := m.base.String() + path
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%w: %s %s: %v", ErrManagement, method, full, err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, full, rd)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrManagement, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if m.user != nil {
		pw, _ := m.user.Password()
		req.SetBasicAuth(m.user.Username(), pw)
	}
	c := m.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrManagement, method, full, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrManagement, method, full, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &managementStatusError{method: method, url: full, status: resp.Status, code: resp.StatusCode,
			text: fmt.Sprintf("%.200s%s", strings.TrimSpace(string(data)), m.advice(resp.StatusCode))}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // 315360000000 stays 315360000000, not 3.1536e+11
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrManagement, method, full, err)
	}
	return nil
}

// managementStatusError is a non-2xx answer of the management API. It wraps ErrManagement.
type managementStatusError struct {
	method, url, status, text string
	code                      int
}

func (e *managementStatusError) Error() string {
	if e.method == http.MethodGet {
		return fmt.Sprintf("%v: GET %s: %s: %s", ErrManagement, e.url, e.status, e.text)
	}
	return fmt.Sprintf("%v: %s %s: %s: %s", ErrManagement, e.method, e.url, e.status, e.text)
}

func (e *managementStatusError) Unwrap() error { return ErrManagement }

// httpStatus returns the HTTP status code of a management API refusal, or 0.
func httpStatus(err error) int {
	var se *managementStatusError
	if errors.As(err, &se) {
		return se.code
	}
	return 0
}

// ManagedQueue is what the management API says about one queue. Counts are -1 when the
// broker has not published statistics for the queue yet (it does every few seconds, see
// collect_statistics_interval).
type ManagedQueue struct {
	Name string
	// Messages is every message the queue holds: ready, unacknowledged and (quorum queues)
	// held in the dead-letter state.
	Messages int64
	// MessagesDLX is the number of messages a quorum queue with at-least-once
	// dead-lettering holds because their dead-lettering has not completed (for example no
	// queue took them); RabbitMQ retries them forever. -1 for classic queues.
	MessagesDLX int64
	Consumers   int64
	Arguments   map[string]any
	// Type is the queue type: quorum, classic or stream.
	Type string
	// Leader is the node of a quorum queue's leader, "" when the node recorded as leader is
	// unreachable (no leader until the election and the queue record catch up) or the queue
	// is not a quorum queue.
	Leader string
	// Members are the nodes with a replica of a quorum queue; Online those of them whose
	// replica runs (see the package documentation's Clusters notes in cluster.go).
	Members []string
	Online  []string
	// Unacked is the number of messages delivered and not yet acknowledged (the management
	// API's messages_unacknowledged); -1 when unknown.
	Unacked int64
	// RedeliverRate, DeliverRate and AckRate are the management API's message rates (per
	// second, over its last statistics samples) of redeliveries, deliveries (deliver_get:
	// redeliveries included) and acknowledgements; -1 when it reports none (no delivery
	// since the queue was declared, or statistics not collected yet).
	RedeliverRate, DeliverRate, AckRate float64
}

// managedQueueColumns are the fields [Management.Queues] asks for: dotted names pick one
// field of a nested object (message_stats.redeliver_details.rate), as the management API's
// columns parameter allows (RabbitMQ 3.10 and 4.3).
const managedQueueColumns = "name,messages,messages_dlx,messages_unacknowledged,consumers,arguments,type,leader,members,online," +
	"message_stats.redeliver_details.rate,message_stats.deliver_get_details.rate,message_stats.ack_details.rate"

// rateJSON is one of the management API's <counter>_details objects.
type rateJSON struct {
	Rate *float64 `json:"rate"`
}

func (r *rateJSON) value() float64 {
	if r == nil || r.Rate == nil {
		return -1
	}
	return *r.Rate
}

// Queues returns the vhost's queues by name.
func (m *Management) Queues(ctx context.Context) (map[string]ManagedQueue, error) {
	var raw []struct {
		Name        string          `json:"name"`
		Messages    *int64          `json:"messages"`
		MessagesDLX *int64          `json:"messages_dlx"`
		Unacked     *int64          `json:"messages_unacknowledged"`
		Consumers   *int64          `json:"consumers"`
		Arguments   map[string]any  `json:"arguments"`
		Type        string          `json:"type"`
		Leader      any             `json:"leader"`
		Members     any             `json:"members"`
		Online      any             `json:"online"`
		Stats       json.RawMessage `json:"message_stats"` // an object, or [] for a queue without statistics (4.3.6)
	}
	if err := m.get(ctx, "api/queues/"+url.PathEscape(m.vhost)+"?columns="+managedQueueColumns, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]ManagedQueue, len(raw))
	val := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	for _, q := range raw {
		mq := ManagedQueue{Name: q.Name, Messages: val(q.Messages), MessagesDLX: val(q.MessagesDLX), Consumers: val(q.Consumers),
			Arguments: q.Arguments, Type: q.Type, Leader: nodeName(q.Leader), Members: nodeNames(q.Members), Online: nodeNames(q.Online),
			Unacked: val(q.Unacked), RedeliverRate: -1, DeliverRate: -1, AckRate: -1}
		var st struct {
			Redeliver  *rateJSON `json:"redeliver_details"`
			DeliverGet *rateJSON `json:"deliver_get_details"`
			Ack        *rateJSON `json:"ack_details"`
		}
		if bytes.HasPrefix(bytes.TrimSpace(q.Stats), []byte("{")) && json.Unmarshal(q.Stats, &st) == nil {
			mq.RedeliverRate, mq.DeliverRate, mq.AckRate = st.Redeliver.value(), st.DeliverGet.value(), st.Ack.value()
		}
		out[q.Name] = mq
	}
	return out, nil
}

// bindingKeys is the set of the keys of bindings (see bindingKey).
func bindingKeys(bindings []Binding) map[string]bool {
	out := make(map[string]bool, len(bindings))
	for _, b := range bindings {
		out[b.key()] = true
	}
	return out
}

// bindings returns every binding of the vhost but the default exchange's (Role is empty).
func (m *Management) bindings(ctx context.Context) ([]Binding, error) {
	var all []Binding // the API's fields have Binding's JSON names
	if err := m.get(ctx, "api/bindings/"+url.PathEscape(m.vhost), &all); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(b Binding) bool { return b.Source == "" }), nil
}

// unplannedBindings picks, from the vhost's bindings, those that lead from or to the plan's
// exchanges (targets excepted: their other bindings are the applications') or to the plan's
// queues (ready queues included) and that the plan does not have: left by an earlier
// specification (a ready queue's old binding key, say), or added by hand. They change where
// messages go. A consumer's retry binding ([Plan.ConsumerRetryBinding]) is not one of them:
// retry lists those the plan does not have.
func unplannedBindings(p *Plan, all []Binding) (unplanned, retry []Binding) {
	ownX, ownQ, planned := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, e := range p.Exchanges {
		if e.Role != RoleTarget {
			ownX[e.Name] = true
		}
	}
	for _, q := range p.Queues {
		ownQ[q.Name] = true
	}
	for _, b := range p.Bindings {
		planned[b.key()] = true
	}
	for _, b := range all {
		ours := ownX[b.Source] || (b.DestinationType == DestQueue && ownQ[b.Destination]) ||
			(b.DestinationType == DestExchange && ownX[b.Destination])
		switch {
		case !ours || planned[b.key()]:
		case p.ConsumerRetryBinding(b):
			retry = append(retry, b)
		case p.scheduleLinksBinding(b): // package schedule's own (see scheduleLinks)
		default:
			unplanned = append(unplanned, b)
		}
	}
	return unplanned, retry
}

// Version returns the RabbitMQ version the management API reports (its overview's
// rabbitmq_version, e.g. "3.10.8" or "4.3.6"). Errors wrap ErrManagement.
func (m *Management) Version(ctx context.Context) (string, error) {
	var raw overview
	if err := m.get(ctx, "api/overview", &raw); err != nil {
		return "", err
	}
	if raw.Version == "" {
		return "", fmt.Errorf("%w: GET %sapi/overview: no rabbitmq_version in the answer", ErrManagement, m.base)
	}
	return raw.Version, nil
}

// MessagesDelayed returns how many messages the delayed-message plugin holds for the exchange
// name (of type x-delayed-message): the messages_delayed field the plugin adds to the
// exchange's information (rabbit_exchange_type_delayed_message:info/2), which the management
// API shows in the exchange's own view (GET /api/exchanges/<vhost>/<name>; the management UI
// shows it as "messages delayed"). found is false when the exchange does not exist or its
// view has no such field (another exchange type, or a plugin release without the counter).
// Errors wrap ErrManagement.
func (m *Management) MessagesDelayed(ctx context.Context, name string) (n int64, found bool, err error) {
	var raw json.RawMessage
	err = m.get(ctx, "api/exchanges/"+url.PathEscape(m.vhost)+"/"+url.PathEscape(name), &raw)
	if httpStatus(err) == http.StatusNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, found, err = parseMessagesDelayed(raw)
	if err != nil {
		return 0, false, fmt.Errorf("%w: GET exchange %q: %v", ErrManagement, name, err)
	}
	return n, found, nil
}

// parseMessagesDelayed reads messages_delayed from the management API's view of one exchange.
func parseMessagesDelayed(data []byte) (int64, bool, error) {
	var raw struct {
		Type            string       `json:"type"`
		MessagesDelayed *json.Number `json:"messages_delayed"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return 0, false, err
	}
	if raw.MessagesDelayed == nil {
		return 0, false, nil
	}
	n, err := raw.MessagesDelayed.Int64()
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("messages_delayed %q is not a count", raw.MessagesDelayed.String())
	}
	return n, true, nil
}

// bindingKey identifies a binding by everything that makes it distinct for the broker.
// Argument values are compared by their printed value, so an int64 7 from the plan equals
// the JSON number 7 from the management API.
func bindingKey(src, dst, dstType, key string, args map[string]any) string {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%q %q %q %q", src, dst, dstType, key)
	for _, k := range keys {
		fmt.Fprintf(&sb, " %q=%v", k, args[k])
	}
	return sb.String()
}

func (b Binding) key() string {
	return bindingKey(b.Source, b.Destination, b.DestinationType, b.RoutingKey, b.Args)
}

// vhostObject is what the management API says about one exchange or queue.
type vhostObject struct {
	// Type is an exchange's type (headers, fanout, ...) or a queue's (quorum, classic,
	// stream; "" when the broker did not say).
	Type                string
	Durable, AutoDelete bool
	// Internal is an exchange's flag, Exclusive a queue's (false for the other kind).
	Internal, Exclusive bool
	// Arguments are the object's arguments as the JSON decoder gives them (numbers as
	// json.Number), nil when none.
	Arguments map[string]any
}

// props returns o's properties keyed as RabbitMQ names them in a 406 "inequivalent arg"
// answer: "type" (exchanges), "durable", "auto_delete", "internal" (exchanges) or "exclusive"
// (queues), and the arguments. nil for a nil o (unknown).
func (o *vhostObject) props(kind Kind) map[string]any {
	if o == nil {
		return nil
	}
	out := map[string]any{"durable": o.Durable, "auto_delete": o.AutoDelete}
	if kind == KindExchange {
		out["type"], out["internal"] = o.Type, o.Internal
	} else {
		out["exclusive"] = o.Exclusive
	}
	for k, v := range o.Arguments {
		out[k] = v
	}
	return out
}

// Unplanned is an exchange or queue named by the plan's naming rule but not in the plan:
// typically left by an earlier specification with the same prefix (another ladder unit,
// radix or order, a bucket no longer listed).
type Unplanned struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
	// Messages is every message a queue holds (-1 for an exchange). Messages in a queue of
	// an earlier ladder still reach their target when due, as long as that ladder's
	// exchanges exist.
	Messages int64 `json:"messages"`
}

// String is "queue NAME (N messages)" or "exchange NAME".
func (u Unplanned) String() string {
	if u.Kind == KindQueue {
		return fmt.Sprintf("queue %s (%s)", u.Name, text.Plural(int(u.Messages), "message"))
	}
	return string(u.Kind) + " " + u.Name
}

// exchangeNames lists the names of the vhost's exchanges.
func (m *Management) exchangeNames(ctx context.Context) ([]string, error) {
	var exchanges []struct {
		Name string `json:"name"`
	}
	if err := m.get(ctx, "api/exchanges/"+url.PathEscape(m.vhost)+"?columns=name", &exchanges); err != nil {
		return nil, err
	}
	names := make([]string, len(exchanges))
	for i, x := range exchanges {
		names[i] = x.Name
	}
	return names, nil
}

// unplannedOf picks, from the vhost's exchange names and queues, the objects of p's naming
// rule that p does not have, sorted by kind and name.
func unplannedOf(p *Plan, exchanges []string, queues map[string]ManagedQueue) []Unplanned {
	planned := map[string]bool{}
	for _, e := range p.Exchanges {
		planned["exchange "+e.Name] = true
	}
	for _, q := range p.Queues {
		planned["queue "+q.Name] = true
	}
	var out []Unplanned
	for _, name := range exchanges {
		if p.Names.Reserved(name) && !planned["exchange "+name] {
			out = append(out, Unplanned{Kind: KindExchange, Name: name, Messages: -1})
		}
	}
	for name, q := range queues {
		if p.Names.Reserved(name) && !planned["queue "+name] {
			out = append(out, Unplanned{Kind: KindQueue, Name: name, Messages: max(q.Messages, 0)})
		}
	}
	slices.SortFunc(out, func(a, b Unplanned) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// nodeName reads a node name field of the management API: a string, or "" for the JSON null,
// an empty string or an empty list some versions give for none.
func nodeName(v any) string {
	s, _ := v.(string)
	return s
}

// nodeNames reads a list of node names; anything else (null, "", a missing field) is none.
func nodeNames(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		if s, ok := x.(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// scheduleLinks is the links exchange of package schedule, <prefix>.schedules.links: a target of
// the delay topology that schedule.New declares and binds to the dispatch exchange itself, so the
// status of the topology expects it.
func scheduleLinks(n delayspec.Names) string { return prefixOf(n) + ".schedules.links" }

// scheduleLinksBinding reports whether b is the dispatch exchange's binding to scheduleLinks.
func (p *Plan) scheduleLinksBinding(b Binding) bool {
	return b.Source == p.Names.Dispatch() && b.DestinationType == DestExchange && b.Destination == scheduleLinks(p.Names)
}
