package metrics

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// SignerPrefix starts the name of every family of the signer's own (Signer), and of no family of
// the gate's: ImportSigner keeps these and drops the rest of the signer's page.
const SignerPrefix = Namespace + "_signer_"

// DefaultSignerImportTimeout bounds one read of the signer's page (SignerImportOptions.Timeout).
const DefaultSignerImportTimeout = 2 * time.Second

// SignerImportOptions configures ImportSigner.
type SignerImportOptions struct {
	// Read returns the signer's metrics page in Prometheus's text format (its GET /metrics on its
	// unix socket). Required.
	Read func(ctx context.Context) ([]byte, error)
	// Timeout bounds one Read. Zero means DefaultSignerImportTimeout.
	Timeout time.Duration
	// Logger receives one line when the signer's page can no longer be read (with the cause) and
	// one when it can again. Nil: none.
	Logger *slog.Logger
}

// SignerImport serves the signer's families on the gate's page, for a signer with no network of
// its own (the compose setup): each scrape of the gate reads the signer's page once. Made by
// ImportSigner.
type SignerImport struct {
	read    func(ctx context.Context) ([]byte, error)
	timeout time.Duration
	log     *slog.Logger

	mu       sync.Mutex // serialises scrapes, so that up and failures say what this scrape read
	own      *prometheus.Registry
	up       prometheus.Gauge
	failures prometheus.Counter
	down     bool // guarded by mu: the last read failed (logged once until one succeeds)
}

// ImportSigner adds to r's page the signer's lockhttp_signer_* families, read with o.Read at each
// scrape, and the gate's lockhttp_gate_signer_metrics_up (1 when this scrape read them, 0 when
// not) and lockhttp_gate_signer_metrics_failures_total. The signer's other families (go_*,
// process_*, lockhttp_build_info) are dropped: they would clash with the gate's own. A signer
// that cannot be read (down, slow, an unreadable page) costs the scrape its families only: the
// gate's are served all the same. A nil r imports nothing.
func ImportSigner(r *Registry, o SignerImportOptions) *SignerImport {
	if o.Read == nil {
		panic("metrics.ImportSigner: SignerImportOptions.Read is nil")
	}
	s := &SignerImport{read: o.Read, timeout: o.Timeout, log: o.Logger, own: prometheus.NewRegistry(),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "gate", Name: "signer_metrics_up",
			Help: "1 when this scrape read the signer's families over its socket, 0 when it could not."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "gate", Name: "signer_metrics_failures_total",
			Help: "Scrapes of the gate that could not read the signer's families (down, slow or an unreadable page)."}),
	}
	if s.timeout == 0 {
		s.timeout = DefaultSignerImportTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.own.MustRegister(s.up, s.failures)
	if r != nil {
		r.mu.Lock()
		r.more = append(r.more, s)
		r.mu.Unlock()
	}
	return s
}

// Gather reads the signer's page and returns its lockhttp_signer_* families with the import's
// own two. It never fails: a page it cannot read is counted, logged and left out.
func (s *SignerImport) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	page, err := s.read(ctx)
	cancel()
	var mfs []*dto.MetricFamily
	if err == nil {
		mfs, err = parseSignerPage(page)
	}
	if err != nil {
		s.up.Set(0)
		s.failures.Inc()
		if !s.down {
			s.log.Warn("the signer's metrics cannot be read; the gate serves its own without them", "err", err.Error())
		}
		s.down = true
		mfs = nil
	} else {
		s.up.Set(1)
		if s.down {
			s.log.Info("the signer's metrics are read again")
		}
		s.down = false
	}
	own, err := s.own.Gather()
	if err != nil {
		return mfs, err
	}
	return append(own, mfs...), nil
}

// parseSignerPage reads a page in the text format and keeps the families named SignerPrefix…,
// checked as the gate's own page would check them (a series twice, a malformed label), so that a
// bad page costs its own families, not the gate's whole answer.
func parseSignerPage(page []byte) ([]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	byName, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("the signer's page: %w", err)
	}
	var kept []*dto.MetricFamily
	for name, mf := range byName {
		if strings.HasPrefix(name, SignerPrefix) {
			kept = append(kept, mf)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("the signer's page has no %s* family: is it the signer's?", SignerPrefix)
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].GetName() < kept[j].GetName() })
	checked, err := prometheus.Gatherers{fixedFamilies(kept)}.Gather()
	if err != nil {
		return nil, fmt.Errorf("the signer's page: %w", err)
	}
	return checked, nil
}

// fixedFamilies is a fixed set of families as a prometheus.Gatherer.
type fixedFamilies []*dto.MetricFamily

func (f fixedFamilies) Gather() ([]*dto.MetricFamily, error) { return f, nil }
