package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HubState is what the hub's gauges read at each scrape (Hub.SetState).
type HubState struct {
	// Pending is the pending tickets of each container.
	Pending map[string]int
	// Authorisations is the approvals that still let a request through once (a retry, or a held
	// request that has not taken its use yet).
	Authorisations int
	// Grants is the approved CONNECTs open for container × host × port.
	Grants int
}

// Hub is the hub's families, in the console's process.
type Hub struct {
	opened   *prometheus.CounterVec
	closed   *prometheus.CounterVec
	limited  *prometheus.CounterVec
	decision *prometheus.HistogramVec
	state    atomic.Pointer[func() HubState]
}

var (
	descPending = prometheus.NewDesc(Namespace+"_hub_tickets_pending", "Tickets waiting for a human, by container.", []string{"container"}, nil)
	descAuth    = prometheus.NewDesc(Namespace+"_hub_authorisations_in_force",
		"Approvals that still let one identical request through (single-use authorisations).", nil, nil)
	descGrants = prometheus.NewDesc(Namespace+"_hub_connect_grants_in_force", "Approved CONNECTs open for container × host × port.", nil, nil)
)

// Ticket outcomes (lockhttp_hub_tickets_closed_total).
const (
	OutcomeApproved = "approved"
	OutcomeDenied   = "denied"
	OutcomeExpired  = "expired"
)

// NewHub registers the hub's families in r.
func NewHub(r *Registry) *Hub {
	h := &Hub{
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "hub", Name: "tickets_opened_total",
			Help: "Tickets opened, by container."}, []string{"container"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "hub", Name: "tickets_closed_total",
			Help: "Tickets closed, by container and outcome: approved, denied, expired."}, []string{"container", "outcome"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "hub", Name: "asks_limited_total",
			Help: "Asks refused with E_ASK_LIMIT (the container had max_pending tickets), by container."}, []string{"container"}),
		decision: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "hub", Name: "decision_seconds",
			Help: "Time from a ticket's opening to a human's decision, by facade (terminal, cli, phone, notify) and outcome.", Buckets: humanBuckets},
			[]string{"facade", "outcome"}),
	}
	r.register(h, h.opened, h.closed, h.limited, h.decision)
	return h
}

// SetState gives the function the gauges read at each scrape.
func (h *Hub) SetState(f func() HubState) {
	if h == nil {
		return
	}
	h.state.Store(&f)
}

// Opened counts a new ticket of container.
func (h *Hub) Opened(container string) {
	if h == nil {
		return
	}
	h.opened.WithLabelValues(container).Inc()
}

// Limited counts an ask refused for max_pending.
func (h *Hub) Limited(container string) {
	if h == nil {
		return
	}
	h.limited.WithLabelValues(container).Inc()
}

// Closed counts a ticket's outcome; for a human's decision (approved, denied) it observes
// after, the time since the ticket opened, under facade.
func (h *Hub) Closed(container, outcome, facade string, after time.Duration) {
	if h == nil {
		return
	}
	h.closed.WithLabelValues(container, outcome).Inc()
	if outcome != OutcomeExpired {
		h.decision.WithLabelValues(facade, outcome).Observe(seconds(after))
	}
}

// Describe implements prometheus.Collector for the gauges.
func (h *Hub) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descAuth
	ch <- descGrants
}

// Collect implements prometheus.Collector: the gauges, read from the hub's state.
func (h *Hub) Collect(ch chan<- prometheus.Metric) {
	f := h.state.Load()
	if f == nil {
		return
	}
	st := (*f)()
	for c, n := range st.Pending {
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(n), c)
	}
	ch <- prometheus.MustNewConstMetric(descAuth, prometheus.GaugeValue, float64(st.Authorisations))
	ch <- prometheus.MustNewConstMetric(descGrants, prometheus.GaugeValue, float64(st.Grants))
}

// Console is the console's families: the policy it serves.
type Console struct {
	info     *prometheus.GaugeVec
	applied  prometheus.Gauge
	failures prometheus.Counter
	review   atomic.Pointer[func() bool]
}

var descReview = prometheus.NewDesc(Namespace+"_console_policy_review_pending",
	"1 while the policy file holds a loosening waiting for a human's review.", nil, nil)

// NewConsole registers the console's families in r.
func NewConsole(r *Registry) *Console {
	c := &Console{
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "console", Name: "policy_info",
			Help: "1 for the approved policy version the console serves."}, []string{"version"}),
		applied: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "console", Name: "policy_applied_timestamp_seconds",
			Help: "When the console last served a new policy (Unix time)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "console", Name: "policy_reload_failures_total",
			Help: "Edits of the policy file that were rejected (unreadable, or invalid); the console keeps serving the approved policy."}),
	}
	r.register(c, c.info, c.applied, c.failures)
	return c
}

// Served records that the console serves version from at on.
func (c *Console) Served(version string, at time.Time) {
	if c == nil {
		return
	}
	c.info.Reset()
	c.info.WithLabelValues(version).Set(1)
	c.applied.Set(float64(at.UnixNano()) / 1e9)
}

// ReloadFailed counts a rejected edit.
func (c *Console) ReloadFailed() {
	if c == nil {
		return
	}
	c.failures.Inc()
}

// SetReview gives the function that tells, at each scrape, whether a loosening waits for
// review.
func (c *Console) SetReview(f func() bool) {
	if c == nil {
		return
	}
	c.review.Store(&f)
}

// Describe implements prometheus.Collector for the review gauge.
func (c *Console) Describe(ch chan<- *prometheus.Desc) { ch <- descReview }

// Collect implements prometheus.Collector: the review gauge.
func (c *Console) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if f := c.review.Load(); f != nil && (*f)() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(descReview, prometheus.GaugeValue, v)
}

// Notify is the notification channels' families, in the console's process.
type Notify struct {
	deliveries *prometheus.CounterVec
	attempts   *prometheus.CounterVec
	decisions  *prometheus.CounterVec
	queued     *prometheus.GaugeVec
}

// Delivery outcomes (lockhttp_notify_deliveries_total).
const (
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"  // every attempt failed
	DeliveryDropped   = "dropped" // the channel's queue was full, or the ticket closed before delivery
)

// NewNotify registers the notification families in r.
func NewNotify(r *Registry) *Notify {
	n := &Notify{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "notify", Name: "deliveries_total",
			Help: "Ticket notifications, by channel and outcome: delivered, failed (every attempt failed), dropped (queue full)."}, []string{"channel", "outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "notify", Name: "attempts_total",
			Help: "POSTs to a channel, by channel and result: ok or error."}, []string{"channel", "result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "notify", Name: "decisions_total",
			Help: "Decisions posted to a channel's decision link, by channel and outcome: approved, denied, refused (403, 400, 409)."}, []string{"channel", "outcome"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "notify", Name: "queue_depth",
			Help: "Notifications waiting for delivery, by channel."}, []string{"channel"}),
	}
	r.register(n.deliveries, n.attempts, n.decisions, n.queued)
	return n
}

// Delivered counts one notification's outcome on channel.
func (n *Notify) Delivered(channel, outcome string) {
	if n == nil {
		return
	}
	n.deliveries.WithLabelValues(channel, outcome).Inc()
}

// Attempted counts one POST to channel.
func (n *Notify) Attempted(channel string, ok bool) {
	if n == nil {
		return
	}
	r := "ok"
	if !ok {
		r = "error"
	}
	n.attempts.WithLabelValues(channel, r).Inc()
}

// Decision counts a decision posted through channel's link.
func (n *Notify) Decision(channel, outcome string) {
	if n == nil {
		return
	}
	n.decisions.WithLabelValues(channel, outcome).Inc()
}

// Queued sets channel's queue depth.
func (n *Notify) Queued(channel string, depth int) {
	if n == nil {
		return
	}
	n.queued.WithLabelValues(channel).Set(float64(depth))
}
