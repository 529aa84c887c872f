// Package exporter serves the delay topology's state as Prometheus metrics, read from the
// management API at every scrape: what `rabbitdelay status --management-url` shows, as numbers
// an alert can watch (`rabbitdelay exporter`). docs/operations.md lists the metrics and alerts.
// Every series the specification configures is in every scrape, at 0 where nothing happened; a
// queue the management API has no figures for yet is left out of its sums. The figures lag by
// up to collect_statistics_interval (https://www.rabbitmq.com/docs/management#statistics-interval).
package exporter

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/metrics"
)

// Options tune an [Exporter]; the zero value sums per level and bucket.
type Options struct {
	// PerQueue adds the label queue to the delay queues' metrics: one series per delay queue
	// instead of one per level and bucket.
	PerQueue bool
	// Timeout bounds the management API requests of one scrape; 0 means DefaultTimeout.
	Timeout time.Duration
	// OnScrape, when set, is called on the scraping goroutine after every scrape with the error
	// that made it report rabbitdelay_up 0 (no password in it), or nil. The Exporter logs nothing.
	OnScrape func(err error)
}

// DefaultTimeout is how long one scrape waits for the management API by default.
const DefaultTimeout = 10 * time.Second

// Exporter is a prometheus.Collector of one plan's topology, read through one management
// API client at every Collect. It is safe for concurrent use.
type Exporter struct {
	m    *admin.Management
	p    *admin.Plan
	opts Options

	up, duration, stats, parking, missing, balanced, degraded *prometheus.Desc
	delayMessages, delayDLX, delayConsumers                   *prometheus.Desc
	ready, policyProblems                                     *prometheus.Desc
	nodeRunning, nodeLeaders, nodeDelayLeaders                *prometheus.Desc
	nodeMembers, waiting, revocations, requeueLoop            *prometheus.Desc
	descs                                                     []*prometheus.Desc
}

// New returns the Exporter of plan p, read through m (whose vhost is the topology's).
func New(m *admin.Management, p *admin.Plan, opts Options) *Exporter {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	e := &Exporter{m: m, p: p, opts: opts}
	desc := func(n, help string, labels ...string) *prometheus.Desc {
		d := prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", n), help, labels, nil)
		e.descs = append(e.descs, d)
		return d
	}
	delay := []string{"path", "level", "bucket"}
	if opts.PerQueue {
		delay = append(delay, "queue")
	}
	e.up = desc("up", "1 when the management API answered this scrape, else 0.")
	e.duration = desc("scrape_duration_seconds", "Time spent reading the management API for this scrape.")
	e.stats = desc("queue_statistics",
		"1 when the management API collects queue statistics, 0 when disable_metrics_collector is set (message gauges absent).")
	e.delayMessages = desc("delay_messages",
		"Messages the delay queues hold, per ladder level or bucket (management API messages: ready and unacknowledged).", delay...)
	e.delayDLX = desc("delay_messages_dlx",
		"Messages held in the delay queues' dead-letter state (messages_dlx): due messages whose dead-lettering has not completed.", delay...)
	e.delayConsumers = desc("delay_queue_consumers",
		"Consumers attached to delay queues; must be 0 (a consumer takes delayed messages before they are due).", delay...)
	e.parking = desc("parking_messages", "Messages in the parking queue.")
	e.ready = desc("ready_queue_messages", "Messages in each ready queue of the specification.", "queue")
	e.missing = desc("missing_queues", "Queues of the specification that the management API does not list.")
	e.policyProblems = desc("policy_problems",
		"Policy keys in effect that break a guarantee (severity error) or deserve a look (warning), by what they break.", "breaks", "severity")
	e.nodeRunning = desc("node_running", "1 when the cluster node runs, 0 when the cluster cannot reach it.", "node")
	e.nodeLeaders = desc("node_leaders", "Quorum queues of the specification whose leader is on the node.", "node")
	e.nodeDelayLeaders = desc("node_delay_queue_leaders", "Delay queues (ladder and bucket) whose leader is on the node.", "node")
	e.nodeMembers = desc("node_members", "Quorum queues of the specification with a replica on the node.", "node")
	e.balanced = desc("leaders_balanced", "1 when the delay queues' leaders are spread over the running nodes, else 0.")
	e.degraded = desc("degraded_queues", "Quorum queues of the specification with a member offline or no leader.")
	e.waiting = desc("dead_letter_waiting_messages", "Messages in dead-letter state that wait for the unreachable node.", "node")
	e.requeueLoop = desc("ready_queue_requeue_loop",
		"1 when the ready queue's consumers requeue messages in a loop that no delivery limit ends (admin.RequeueLoopOf), else 0.", "queue")
	e.revocations = desc("revocation_stream_messages",
		"Messages in the revocation stream <prefix>.revoked: revocation records and the fences of its readers.", "queue")
	return e
}

// Describe sends the descriptors of every metric the Exporter can report.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range e.descs {
		ch <- d
	}
}

type group struct{ path, level, bucket, queue string }

// Collect reads the management API (bounded by Options.Timeout) and sends the metrics.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) { e.collect(context.Background(), ch) }

func (e *Exporter) collect(ctx context.Context, ch chan<- prometheus.Metric) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	s, err := e.m.Snapshot(ctx, e.p)
	if e.opts.OnScrape != nil {
		e.opts.OnScrape(err)
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	ch <- prometheus.MustNewConstMetric(e.duration, prometheus.GaugeValue, time.Since(start).Seconds())
	gauge(e.up, one(err == nil))
	if err != nil {
		return
	}
	gauge(e.stats, one(!s.StatsDisabled))
	e.collectQueues(s, gauge)
	collectPolicyProblems(e.policyProblems, s.PolicyProblems, gauge)
	c := s.Cluster
	if c == nil {
		return
	}
	waiting := map[string]int64{} // every node's series present, at 0 when nothing waits on it
	for _, n := range c.Nodes {
		if n.Running != nil {
			gauge(e.nodeRunning, one(*n.Running), n.Name)
		}
		gauge(e.nodeLeaders, int64(n.Leaders), n.Name)
		gauge(e.nodeDelayLeaders, int64(n.DelayQueues), n.Name)
		gauge(e.nodeMembers, int64(n.Members), n.Name)
		waiting[n.Name] = 0
	}
	gauge(e.balanced, one(c.Balanced))
	gauge(e.degraded, int64(len(c.Degraded)))
	for _, w := range c.Waits {
		waiting[w.Node] += w.Messages
	}
	for n, v := range waiting {
		gauge(e.waiting, v, n)
	}
}

type gaugeFunc func(d *prometheus.Desc, v int64, labels ...string)

func one(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (e *Exporter) collectQueues(s *admin.Snapshot, gauge gaugeFunc) {
	var order []group
	groups := map[group]*[3]int64{} // messages, dlx, consumers; -1 while no queue has a figure
	missing := 0
	seen := map[string]bool{} // a ready queue with several bindings is in the plan once per binding
	for _, q := range e.p.Queues {
		if seen[q.Name] {
			continue
		}
		seen[q.Name] = true
		mq, ok := s.Queues[q.Name]
		if !ok {
			// A missing queue holds nothing: its series are 0 (rabbitdelay_missing_queues counts it).
			missing++
			mq = admin.ManagedQueue{Name: q.Name, RedeliverRate: -1, DeliverRate: -1, AckRate: -1}
		}
		switch {
		case q.IsDelay():
			g := group{path: string(q.Role)}
			if q.Role == admin.RoleLadder {
				g.level = strconv.Itoa(q.Level)
			} else {
				g.bucket = (time.Duration(q.TTL) * time.Millisecond).String()
			}
			if e.opts.PerQueue {
				g.queue = q.Name
			}
			t, seen := groups[g]
			if !seen {
				t = &[3]int64{-1, -1, -1}
				groups[g] = t
				order = append(order, g)
			}
			for i, v := range []int64{mq.Messages, mq.MessagesDLX, mq.Consumers} {
				if v >= 0 { // a queue without a figure (-1) leaves the sum as it is
					t[i] = max(t[i], 0) + v
				}
			}
		case q.Role == admin.RoleParking && mq.Messages >= 0:
			gauge(e.parking, mq.Messages)
		case q.Role == admin.RoleRevoked && mq.Messages >= 0:
			gauge(e.revocations, mq.Messages, q.Name)
		case q.Role == admin.RoleReady:
			if mq.Messages >= 0 {
				gauge(e.ready, mq.Messages, q.Name)
			}
			_, looping := admin.RequeueLoopOf(q, mq, s.Version)
			gauge(e.requeueLoop, one(looping), q.Name)
		}
	}
	for _, g := range order {
		t := groups[g]
		labels := []string{g.path, g.level, g.bucket}
		if e.opts.PerQueue {
			labels = append(labels, g.queue)
		}
		for i, d := range []*prometheus.Desc{e.delayMessages, e.delayDLX, e.delayConsumers} {
			if t[i] >= 0 {
				gauge(d, t[i], labels...)
			}
		}
	}
	gauge(e.missing, int64(missing))
}

// collectPolicyProblems sends the policy problems per breakage and severity, every series
// present.
func collectPolicyProblems(d *prometheus.Desc, pps []admin.PolicyProblem, gauge gaugeFunc) {
	type problem struct{ breaks, severity string }
	problems := map[problem]int64{}
	for _, b := range []admin.Breakage{admin.BreaksEarly, admin.BreaksDeletes, admin.BreaksDrops, admin.BreaksStalls,
		admin.BreaksRouting} {
		problems[problem{string(b), "error"}], problems[problem{string(b), "warning"}] = 0, 0
	}
	for _, pp := range pps {
		k := problem{breaks: string(pp.Breaks), severity: "error"}
		if pp.Warning {
			k.severity = "warning"
		}
		problems[k]++
	}
	for k, n := range problems {
		gauge(d, n, k.breaks, k.severity)
	}
}
