package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Signer is the signer's families.
type Signer struct {
	requests *prometheus.CounterVec
	duration prometheus.Histogram
}

// Outcomes of the signer's requests (Signer.Signed).
const (
	SignIssued      = "issued"
	SignRefused     = "refused"      // the name is one the signer never certifies
	SignRateLimited = "rate-limited" // over --rate
	SignBadRequest  = "bad-request"  // an unreadable request
	SignFailed      = "failed"       // signing itself failed
)

// NewSigner registers the signer's families in r.
func NewSigner(r *Registry) *Signer {
	s := &Signer{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "signer", Name: "requests_total",
			Help: "Sign requests the signer answered, by outcome: issued, refused, rate-limited, bad-request, failed."}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "signer", Name: "sign_duration_seconds",
			Help: "Time the signer took to issue a certificate.", Buckets: networkBuckets}),
	}
	for _, o := range []string{SignIssued, SignRefused, SignRateLimited, SignBadRequest, SignFailed} {
		s.requests.WithLabelValues(o)
	}
	r.register(s.requests, s.duration)
	return s
}

// Signed counts one sign request's outcome; d is the signing time of an issued certificate.
func (s *Signer) Signed(outcome string, d time.Duration) {
	if s == nil {
		return
	}
	s.requests.WithLabelValues(outcome).Inc()
	if outcome == SignIssued {
		s.duration.Observe(seconds(d))
	}
}

// SignerClient is the gate's families of its signer calls and its leaf certificate cache.
type SignerClient struct {
	calls    *prometheus.CounterVec
	duration prometheus.Histogram
	hits     prometheus.Counter
	misses   prometheus.Counter
}

// Results of the gate's signer calls (SignerClient.Called).
const (
	CallIssued      = "issued"
	CallRefused     = "refused"     // the signer refused the name
	CallUnavailable = "unavailable" // no answer, or not a certificate
	CallInvalid     = "invalid"     // a certificate that does not check out
)

// NewSignerClient registers the signer client's families in r; entries is read at each scrape
// (nil: no gauge).
func NewSignerClient(r *Registry, entries func() int) *SignerClient {
	s := &SignerClient{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "gate", Name: "signer_calls_total",
			Help: "Calls the gate made to the signer, by result: issued, refused, unavailable, invalid."}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "gate", Name: "signer_call_duration_seconds",
			Help: "Time a signer call took, from the gate.", Buckets: networkBuckets}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "gate", Name: "leaf_cache_hits_total",
			Help: "Leaf certificates served from the gate's cache."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "gate", Name: "leaf_cache_misses_total",
			Help: "Leaf certificates not in the gate's cache (a signer call made or joined)."}),
	}
	for _, c := range []string{CallIssued, CallRefused, CallUnavailable, CallInvalid} {
		s.calls.WithLabelValues(c)
	}
	r.register(s.calls, s.duration, s.hits, s.misses)
	if entries != nil {
		r.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "gate", Name: "leaf_cache_entries",
			Help: "Leaf certificates in the gate's cache."}, func() float64 { return float64(entries()) }))
	}
	return s
}

// Called counts one signer call and its time.
func (s *SignerClient) Called(result string, d time.Duration) {
	if s == nil {
		return
	}
	s.calls.WithLabelValues(result).Inc()
	s.duration.Observe(seconds(d))
}

// Cache counts a cache lookup.
func (s *SignerClient) Cache(hit bool) {
	if s == nil {
		return
	}
	if hit {
		s.hits.Inc()
	} else {
		s.misses.Inc()
	}
}
