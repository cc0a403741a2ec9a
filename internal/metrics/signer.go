package metrics

import (
	"time"
)

// Signer is the signer's families.
type Signer struct {
	requests counterVec
	duration *histogram
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
		requests: r.newCounterVec(Namespace+"_signer_requests_total",
			"Sign requests the signer answered, by outcome: issued, refused, rate-limited, bad-request, failed.", "outcome"),
		duration: r.newHistogram(Namespace+"_signer_sign_duration_seconds",
			"Time the signer took to issue a certificate.", networkBuckets),
	}
	for _, o := range []string{SignIssued, SignRefused, SignRateLimited, SignBadRequest, SignFailed} {
		s.requests.WithLabelValues(o)
	}
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
	calls    counterVec
	duration *histogram
	hits     *counter
	misses   *counter
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
		calls: r.newCounterVec(Namespace+"_gate_signer_calls_total",
			"Calls the gate made to the signer, by result: issued, refused, unavailable, invalid.", "result"),
		duration: r.newHistogram(Namespace+"_gate_signer_call_duration_seconds",
			"Time a signer call took, from the gate.", networkBuckets),
		hits: r.newCounter(Namespace+"_gate_leaf_cache_hits_total", "Leaf certificates served from the gate's cache."),
		misses: r.newCounter(Namespace+"_gate_leaf_cache_misses_total",
			"Leaf certificates not in the gate's cache (a signer call made or joined)."),
	}
	for _, c := range []string{CallIssued, CallRefused, CallUnavailable, CallInvalid} {
		s.calls.WithLabelValues(c)
	}
	if entries != nil {
		r.newGaugeFunc(Namespace+"_gate_leaf_cache_entries", "Leaf certificates in the gate's cache.", func() float64 { return float64(entries()) })
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
