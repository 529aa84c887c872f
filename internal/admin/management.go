package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// ErrManagement wraps every error from the management HTTP API.
var ErrManagement = errors.New("topology: management API")

// Management reads what AMQP cannot see from RabbitMQ's management HTTP API
// (https://www.rabbitmq.com/docs/management#http-api): bindings, messages_dlx, exchange types
// and the policies in effect. It writes only the topology's own policies (Apply and Teardown
// do), which needs the policymaker tag.
type Management struct {
	base  *url.URL // without user information
	user  *url.Userinfo
	vhost string
	// Client is the HTTP client; nil means http.DefaultClient. A request is bounded by its
	// context, or by requestTimeout when the context has no deadline.
	Client *http.Client
}

// NewManagement returns a client of the management API at rawURL
// (http://user:password@host:15672/) for vhost ("/" when empty). It returns an error wrapping
// ErrManagement when rawURL does not parse or is not http(s); the error never shows the password.
func NewManagement(rawURL, vhost string) (*Management, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || amqpconn.MisplacedAt(rawURL) {
		// Not the parser's message: it can quote part of the password.
		shown := "URL"
		if strings.Contains(rawURL, "://") {
			shown = fmt.Sprintf("URL %q", amqpconn.RedactUserinfo(rawURL))
		}
		return nil, fmt.Errorf("%w: %s is not a valid management API URL: want \"http://\" or \"https://\", then "+
			"user:password@host:15672/ (percent-encode special characters such as # ? / @ : %% and space in the "+
			"user name and password)", ErrManagement, shown)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/api") {
		// API paths are appended: a query or fragment would land mid-request; "/api/" doubles "api".
		return nil, fmt.Errorf("%w: management API URL %q: give the root of the management UI, without a query, fragment "+
			"or /api path (e.g. http://user:password@host:15672/, or http://user:password@host/rabbitmq/ behind a proxy path)",
			ErrManagement, amqpconn.Redact((&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()))
	}
	vhost = cmp.Or(vhost, "/")
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
		// 401 is both a wrong password and a user without a management tag.
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

// requestTimeout bounds a request whose context has no deadline (a context deadline alone
// bounds the others: a busy broker can take over 30 s to answer a policy change).
var requestTimeout = 30 * time.Second

// do sends method on path (relative to the base URL) with body as JSON (if not nil) and
// decodes a 2xx answer into out (if not nil).
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
	resp, err := cmp.Or(m.Client, http.DefaultClient).Do(req)
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
	return fmt.Sprintf("%v: %s %s: %s: %s", ErrManagement, e.method, e.url, e.status, e.text)
}

func (e *managementStatusError) Unwrap() error { return ErrManagement }

func httpStatus(err error) int {
	var se *managementStatusError
	if errors.As(err, &se) {
		return se.code
	}
	return 0
}

// ManagedQueue is what the management API says about one queue. Counts are -1 until the
// broker publishes the queue's statistics (collect_statistics_interval).
type ManagedQueue struct {
	Name     string
	Messages int64 // every message held: ready, unacknowledged and in dead-letter state
	// MessagesDLX counts messages whose at-least-once dead-lettering has not completed
	// (RabbitMQ retries them forever); -1 for classic queues.
	MessagesDLX int64
	Consumers   int64
	Arguments   map[string]any
	Type        string   // quorum, classic or stream
	Leader      string   // a quorum queue's leader node, "" when unreachable or not a quorum queue
	Members     []string // nodes with a replica; Online those whose replica runs
	Online      []string
	Unacked     int64 // messages_unacknowledged; -1 when unknown
	// RedeliverRate, DeliverRate (deliver_get) and AckRate are per-second rates over the last
	// statistics samples; -1 when none is reported.
	RedeliverRate, DeliverRate, AckRate float64
}

// managedQueueColumns are the fields [Management.Queues] asks for (dotted names pick a nested
// field; RabbitMQ 3.10 and 4.3).
const managedQueueColumns = "name,messages,messages_dlx,messages_unacknowledged,consumers,arguments,type,leader,members,online," +
	"message_stats.redeliver_details.rate,message_stats.deliver_get_details.rate,message_stats.ack_details.rate"

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
		Name        string         `json:"name"`
		Messages    *int64         `json:"messages"`
		MessagesDLX *int64         `json:"messages_dlx"`
		Unacked     *int64         `json:"messages_unacknowledged"`
		Consumers   *int64         `json:"consumers"`
		Arguments   map[string]any `json:"arguments"`
		Type        string         `json:"type"`
		Leader      any            `json:"leader"`
		Members     any            `json:"members"`
		Online      any            `json:"online"`
		// an object, or [] for a queue without statistics (4.3.6)
		Stats json.RawMessage `json:"message_stats"`
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
		leader, _ := q.Leader.(string) // some versions give null or [] for none
		mq := ManagedQueue{Name: q.Name, Messages: val(q.Messages), MessagesDLX: val(q.MessagesDLX), Consumers: val(q.Consumers),
			Arguments: q.Arguments, Type: q.Type, Leader: leader, Members: nodeNames(q.Members), Online: nodeNames(q.Online),
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

// unplannedBindings picks the vhost's bindings from or to the plan's exchanges (targets
// excepted) or to its queues that the plan does not have; consumers' retry bindings
// ([Plan.ConsumerRetryBinding]) go to retry instead.
func unplannedBindings(p *Plan, all []Binding) (unplanned, retry []Binding) {
	ownX, ownQ, planned := map[string]bool{}, map[string]bool{}, bindingKeys(p.Bindings)
	for _, e := range p.Exchanges {
		ownX[e.Name] = e.Role != RoleTarget
	}
	for _, q := range p.Queues {
		ownQ[q.Name] = true
	}
	for _, b := range all {
		ours := ownX[b.Source] || (b.DestinationType == DestQueue && ownQ[b.Destination]) ||
			(b.DestinationType == DestExchange && ownX[b.Destination])
		switch {
		case !ours || planned[b.key()]:
		case p.ConsumerRetryBinding(b):
			retry = append(retry, b)
		case p.scheduleLinksBinding(b):
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

// MessagesDelayed returns how many messages the delayed-message plugin holds for exchange
// name: the messages_delayed field of GET /api/exchanges/<vhost>/<name>
// (rabbit_exchange_type_delayed_message:info/2). found is false when the exchange does not
// exist or has no such field. Errors wrap ErrManagement.
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

// key identifies a binding by everything that makes it distinct for the broker. Argument
// values compare by their printed value: the plan's int64 7 equals the API's JSON number 7.
func (b Binding) key() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%q %q %q %q", b.Source, b.Destination, b.DestinationType, b.RoutingKey)
	for _, k := range slices.Sorted(maps.Keys(b.Args)) {
		fmt.Fprintf(&sb, " %q=%v", k, b.Args[k])
	}
	return sb.String()
}

// props returns o's properties keyed as a 406 "inequivalent arg" answer names them; nil for a
// nil o (unknown).
func (o *managedObject) props(kind Kind) map[string]any {
	if o == nil {
		return nil
	}
	out := map[string]any{"durable": o.Durable, "auto_delete": o.AutoDelete}
	if kind == KindExchange {
		out["type"], out["internal"] = o.Type, o.Internal
	} else {
		out["exclusive"] = o.Exclusive
	}
	maps.Copy(out, o.Arguments)
	return out
}

// Unplanned is an exchange or queue named by the plan's naming rule but not in the plan,
// typically left by an earlier specification with the same prefix.
type Unplanned struct {
	Kind     Kind   `json:"kind"`
	Name     string `json:"name"`
	Messages int64  `json:"messages"` // every message a queue holds (-1 for an exchange)
}

// String is "queue NAME (N messages)" or "exchange NAME".
func (u Unplanned) String() string {
	if u.Kind == KindQueue {
		return fmt.Sprintf("queue %s (%s)", u.Name, text.Plural(int(u.Messages), "message"))
	}
	return string(u.Kind) + " " + u.Name
}

func (m *Management) exchangeNames(ctx context.Context) ([]string, error) {
	return m.column(ctx, "api/exchanges/"+url.PathEscape(m.vhost)+"?columns=name", "name")
}

// column reads field (a string) of each row that GET path answers.
func (m *Management) column(ctx context.Context, path, field string) ([]string, error) {
	var rows []map[string]any
	if err := m.get(ctx, path, &rows); err != nil {
		return nil, err
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i], _ = r[field].(string)
	}
	return out, nil
}

// unplannedOf picks the vhost's objects of p's naming rule that p does not have, sorted by
// kind and name.
func unplannedOf(p *Plan, exchanges []string, queues map[string]ManagedQueue) []Unplanned {
	var out []Unplanned
	for _, name := range exchanges {
		if _, ok := p.Exchange(name); p.Names.Reserved(name) && !ok {
			out = append(out, Unplanned{Kind: KindExchange, Name: name, Messages: -1})
		}
	}
	for name, q := range queues {
		if _, ok := p.Queue(name); p.Names.Reserved(name) && !ok {
			out = append(out, Unplanned{Kind: KindQueue, Name: name, Messages: max(q.Messages, 0)})
		}
	}
	slices.SortFunc(out, func(a, b Unplanned) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
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

// scheduleLinksBinding reports whether b binds the dispatch exchange to package schedule's
// <prefix>.schedules.links, which schedule.New declares and binds itself.
func (p *Plan) scheduleLinksBinding(b Binding) bool {
	return b.Source == p.Names.Dispatch() && b.DestinationType == DestExchange && b.Destination == prefixOf(p.Names)+".schedules.links"
}

// TopicPermissionExchanges returns the exchanges of the client's vhost on which user has a
// topic permission (GET /api/topic-permissions/<vhost>/<user>), sorted: RabbitMQ closes the
// channel (403) when a publish's routing key does not match its write pattern on a topic
// exchange (rabbit_channel check_topic_authorisation). Another user's need the administrator
// tag. Errors wrap ErrManagement.
func (m *Management) TopicPermissionExchanges(ctx context.Context, user string) ([]string, error) {
	out, err := m.column(ctx, "api/topic-permissions/"+url.PathEscape(m.vhost)+"/"+url.PathEscape(user), "exchange")
	if httpStatus(err) == http.StatusNotFound {
		return nil, nil
	}
	slices.Sort(out)
	return out, err
}

// UnboundTargets returns the targets of spec that the dispatch exchange is not bound to (one
// request), for amqpdelay.Config.Management. Errors wrap ErrInvalidSpec for an invalid spec,
// or are the management API's.
func (m *Management) UnboundTargets(ctx context.Context, spec delayspec.Spec) ([]string, error) {
	p, err := NewPlan(spec)
	if err != nil {
		return nil, err
	}
	have, err := m.dispatchBindings(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("topology: check the bindings of the dispatch exchange %q: %w", p.Names.Dispatch(), err)
	}
	var unbound []string
	for _, t := range p.Spec.Targets {
		if want, ok := p.dispatchBinding(t.Name); !ok || !have[want.key()] {
			unbound = append(unbound, t.Name)
		}
	}
	return unbound, nil
}

// UnsafePolicies returns the [Failing] [Management.PolicyProblems] of spec's topology, one line
// each. Errors wrap ErrInvalidSpec for an invalid spec, or are the management API's.
func (m *Management) UnsafePolicies(ctx context.Context, spec delayspec.Spec) ([]string, error) {
	p, err := NewPlan(spec)
	if err != nil {
		return nil, err
	}
	pps, err := m.PolicyProblems(ctx, p)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, pp := range Failing(pps) {
		lines = append(lines, pp.Error())
	}
	return lines, nil
}
