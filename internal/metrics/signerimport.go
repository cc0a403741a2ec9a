package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
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
	up       gauge
	failures counter
	down     bool // guarded by mu: the last read failed (logged once until one succeeds)
}

var (
	descImportUp = newDesc(Namespace+"_gate_signer_metrics_up",
		"1 when this scrape read the signer's families over its socket, 0 when it could not.", Gauge)
	descImportFailures = newDesc(Namespace+"_gate_signer_metrics_failures_total",
		"Scrapes of the gate that could not read the signer's families (down, slow or an unreadable page).", Counter)
)

// ImportSigner adds to r's page the signer's lockhttp_signer_* families, read with o.Read at each
// scrape, and the gate's lockhttp_gate_signer_metrics_up (1 when this scrape read them, 0 when
// not) and lockhttp_gate_signer_metrics_failures_total. The signer's other families (go_*,
// process_*, lockhttp_build_info) are dropped: they would clash with the gate's own. A signer
// that cannot be read (down, slow, an unreadable page: ParseText's bounds and checks) costs the
// scrape its families only: the gate's are served all the same. A nil r imports nothing.
func ImportSigner(r *Registry, o SignerImportOptions) *SignerImport {
	if o.Read == nil {
		panic("metrics.ImportSigner: SignerImportOptions.Read is nil")
	}
	s := &SignerImport{read: o.Read, timeout: o.Timeout, log: o.Logger}
	if s.timeout == 0 {
		s.timeout = DefaultSignerImportTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if r != nil {
		r.mu.Lock()
		for _, n := range []string{descImportUp.name, descImportFailures.name} {
			if r.names[n] {
				r.mu.Unlock()
				panic("metrics: family " + n + " registered twice")
			}
			r.names[n] = true
		}
		r.more = append(r.more, s)
		r.mu.Unlock()
	}
	return s
}

// collect reads the signer's page and adds its lockhttp_signer_* families with the import's own
// two. It never fails: a page it cannot read is counted, logged and left out.
func (s *SignerImport) collect(out []Family) []Family {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	page, err := s.read(ctx)
	cancel()
	var fams []Family
	if err == nil {
		fams, err = parseSignerPage(page)
	}
	if err != nil {
		s.up.Set(0)
		s.failures.Inc()
		if !s.down {
			s.log.Warn("the signer's metrics cannot be read; the gate serves its own without them", "err", err.Error())
		}
		s.down = true
		fams = nil
	} else {
		s.up.Set(1)
		if s.down {
			s.log.Info("the signer's metrics are read again")
		}
		s.down = false
	}
	up, failures := descImportUp.family(1), descImportFailures.family(1)
	up.Series = append(up.Series, Series{Value: s.up.value()})
	failures.Series = append(failures.Series, Series{Value: float64(s.failures.value())})
	return append(append(out, up, failures), fams...)
}

// parseSignerPage reads a page in the text format (ParseText) and keeps the families named
// SignerPrefix…, checked as the gate's own page is checked (a series twice, a malformed label),
// so that a bad page costs its own families, not the gate's whole answer.
func parseSignerPage(page []byte) ([]Family, error) {
	fams, err := ParseText(page)
	if err != nil {
		return nil, fmt.Errorf("the signer's page: %w", err)
	}
	kept := fams[:0]
	for _, f := range fams {
		if strings.HasPrefix(f.Name, SignerPrefix) {
			kept = append(kept, f)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("the signer's page has no %s* family: is it the signer's?", SignerPrefix)
	}
	if err := check(kept); err != nil {
		return nil, fmt.Errorf("the signer's page: %w", err)
	}
	return kept, nil
}
