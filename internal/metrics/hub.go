package metrics

import (
	"sync/atomic"
	"time"
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
	opened   counterVec
	closed   counterVec
	limited  counterVec
	decision histogramVec
	state    atomic.Pointer[func() HubState]
}

var (
	descPending = newDesc(Namespace+"_hub_tickets_pending", "Tickets waiting for a human, by container.", Gauge, "container")
	descAuth    = newDesc(Namespace+"_hub_authorisations_in_force",
		"Approvals that still let one identical request through (single-use authorisations).", Gauge)
	descGrants = newDesc(Namespace+"_hub_connect_grants_in_force", "Approved CONNECTs open for container × host × port.", Gauge)
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
		opened: r.newCounterVec(Namespace+"_hub_tickets_opened_total", "Tickets opened, by container.", "container"),
		closed: r.newCounterVec(Namespace+"_hub_tickets_closed_total",
			"Tickets closed, by container and outcome: approved, denied, expired.", "container", "outcome"),
		limited: r.newCounterVec(Namespace+"_hub_asks_limited_total",
			"Asks refused with E_ASK_LIMIT (the container had max_pending tickets), by container.", "container"),
		decision: r.newHistogramVec(Namespace+"_hub_decision_seconds",
			"Time from a ticket's opening to a human's decision, by facade (terminal, cli, phone, notify) and outcome.", humanBuckets,
			"facade", "outcome"),
	}
	r.register([]string{descPending.name, descAuth.name, descGrants.name}, collectFunc(h.collect))
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

// collect adds the gauges, read from the hub's state; none before SetState.
func (h *Hub) collect(out []Family) []Family {
	f := h.state.Load()
	if f == nil {
		return out
	}
	st := (*f)()
	pending := descPending.family(len(st.Pending))
	for c, n := range st.Pending {
		pending.Series = append(pending.Series, Series{Labels: descPending.labelsOf([]string{c}), Value: float64(n)})
	}
	auth, grants := descAuth.family(1), descGrants.family(1)
	auth.Series = append(auth.Series, Series{Value: float64(st.Authorisations)})
	grants.Series = append(grants.Series, Series{Value: float64(st.Grants)})
	return append(out, pending, auth, grants)
}

// Console is the console's families: the policy it serves.
type Console struct {
	info     gaugeVec
	applied  *gauge
	failures *counter
	review   atomic.Pointer[func() bool]
}

var descReview = newDesc(Namespace+"_console_policy_review_pending",
	"1 while the policy file holds a loosening waiting for a human's review.", Gauge)

// NewConsole registers the console's families in r.
func NewConsole(r *Registry) *Console {
	c := &Console{
		info: r.newGaugeVec(Namespace+"_console_policy_info", "1 for the approved policy version the console serves.", "version"),
		applied: r.newGauge(Namespace+"_console_policy_applied_timestamp_seconds",
			"When the console last served a new policy (Unix time)."),
		failures: r.newCounter(Namespace+"_console_policy_reload_failures_total",
			"Edits of the policy file that were rejected (unreadable, or invalid); the console keeps serving the approved policy."),
	}
	r.register([]string{descReview.name}, collectFunc(c.collect))
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

// collect adds the review gauge.
func (c *Console) collect(out []Family) []Family {
	v := 0.0
	if f := c.review.Load(); f != nil && (*f)() {
		v = 1
	}
	f := descReview.family(1)
	f.Series = append(f.Series, Series{Value: v})
	return append(out, f)
}

// Notify is the notification channels' families, in the console's process.
type Notify struct {
	deliveries counterVec
	attempts   counterVec
	decisions  counterVec
	queued     gaugeVec
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
		deliveries: r.newCounterVec(Namespace+"_notify_deliveries_total",
			"Ticket notifications, by channel and outcome: delivered, failed (every attempt failed), dropped (queue full).", "channel", "outcome"),
		attempts: r.newCounterVec(Namespace+"_notify_attempts_total",
			"POSTs to a channel, by channel and result: ok or error.", "channel", "result"),
		decisions: r.newCounterVec(Namespace+"_notify_decisions_total",
			"Decisions posted to a channel's decision link, by channel and outcome: approved, denied, refused (403, 400, 409).", "channel", "outcome"),
		queued: r.newGaugeVec(Namespace+"_notify_queue_depth", "Notifications waiting for delivery, by channel.", "channel"),
	}
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
