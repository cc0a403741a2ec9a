package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// signerPage is the page a signer's registry serves at GET /metrics, after it issued n
// certificates.
func signerPage(t *testing.T, n int) []byte {
	t.Helper()
	r := NewRegistry("signer", "v1")
	s := NewSigner(r)
	for range n {
		s.Signed(SignIssued, time.Millisecond)
	}
	s.Signed(SignRefused, 0)
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("the signer's page: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// gateWithImport is a gate's registry (its own families and the signer client's) importing
// the signer's page through read.
func gateWithImport(t *testing.T, read func(context.Context) ([]byte, error), log *slog.Logger) (*Registry, *SignerImport) {
	t.Helper()
	r := NewRegistry("gate", "v2")
	NewGate(r, GateState{}).PolicyFetchFailed()
	NewSignerClient(r, func() int { return 1 }).Called(CallIssued, time.Millisecond)
	return r, ImportSigner(r, SignerImportOptions{Read: read, Timeout: 200 * time.Millisecond, Logger: log})
}

// byName gathers r and indexes the families by name.
func byName(t *testing.T, r *Registry) map[string]*Family {
	t.Helper()
	fams, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*Family{}
	for i := range fams {
		out[fams[i].Name] = &fams[i]
	}
	return out
}

// value is the one sample of a counter or gauge family, or of its series whose label has value.
func value(t *testing.T, f *Family, label, want string) float64 {
	t.Helper()
	if f == nil {
		t.Fatal("no such family")
	}
	for _, s := range f.Series {
		if label == "" || s.Label(label) == want {
			return s.Value
		}
	}
	t.Fatalf("%s has no series %s=%q", f.Name, label, want)
	return 0
}

// TestSignerImportMerges: the gate's page carries the signer's lockhttp_signer_* families as the
// signer counted them, and none of its other families: one go_* and process_* of the gate's own,
// lockhttp_build_info of the gate only.
func TestSignerImportMerges(t *testing.T) {
	page := signerPage(t, 3)
	if !strings.Contains(string(page), "go_goroutines") || !strings.Contains(string(page), `lockhttp_build_info{process="signer"`) {
		t.Fatalf("the signer's page lacks what the import must drop:\n%.1000s", page)
	}
	r, _ := gateWithImport(t, func(context.Context) ([]byte, error) { return page, nil }, nil)
	fams := byName(t, r)
	if got := value(t, fams["lockhttp_signer_requests_total"], "outcome", SignIssued); got != 3 {
		t.Errorf("lockhttp_signer_requests_total{outcome=issued} %v, want 3", got)
	}
	if got := value(t, fams["lockhttp_signer_requests_total"], "outcome", SignRefused); got != 1 {
		t.Errorf("lockhttp_signer_requests_total{outcome=refused} %v, want 1", got)
	}
	if h := fams["lockhttp_signer_sign_duration_seconds"].Series; len(h) != 1 || h[0].Count != 3 || h[0].Buckets[0].Count != 0 || h[0].Buckets[1].Count != 3 {
		t.Errorf("lockhttp_signer_sign_duration_seconds: %v, want one histogram of 3 samples of 1 ms", h)
	}
	if got := value(t, fams["lockhttp_gate_signer_metrics_up"], "", ""); got != 1 {
		t.Errorf("lockhttp_gate_signer_metrics_up %v, want 1", got)
	}
	if got := value(t, fams["lockhttp_gate_signer_calls_total"], "result", CallIssued); got != 1 {
		t.Errorf("the gate's own lockhttp_gate_signer_calls_total %v, want 1", got)
	}
	info := fams["lockhttp_build_info"].Series
	if len(info) != 1 || value(t, fams["lockhttp_build_info"], "process", "gate") != 1 {
		t.Errorf("lockhttp_build_info: %v, want the gate's alone", info)
	}
	if g := fams["go_goroutines"].Series; len(g) != 1 {
		t.Errorf("go_goroutines has %d series, want the gate's one", len(g))
	}
	// The whole page as Prometheus reads it.
	promtoolCheck(t, "the gate's page with the signer's families", scrape(t, r))
}

// TestSignerImportDown: a signer that cannot be read (refused, slow, an unreadable page, a page
// of another program) leaves the gate's page whole, without the signer's families, with up 0 and
// a failure counted; it is logged once until the signer is read again.
func TestSignerImportDown(t *testing.T) {
	good := signerPage(t, 1)
	cases := []struct {
		name string
		read func(ctx context.Context) ([]byte, error)
	}{
		{"refused", func(context.Context) ([]byte, error) {
			return nil, errors.New("signer unavailable: dial unix /run/lockhttp/signer.sock: connect: no such file or directory")
		}},
		{"slow", func(ctx context.Context) ([]byte, error) {
			<-ctx.Done() // the import's timeout ends the read
			return nil, ctx.Err()
		}},
		{"unreadable", func(context.Context) ([]byte, error) {
			return []byte("lockhttp_signer_requests_total{outcome=\"issued\" 3\n"), nil
		}},
		{"a series twice", func(context.Context) ([]byte, error) {
			return []byte("# TYPE lockhttp_signer_x_total counter\nlockhttp_signer_x_total 1\nlockhttp_signer_x_total 2\n"), nil
		}},
		{"not the signer's", func(context.Context) ([]byte, error) {
			return []byte("# TYPE go_goroutines gauge\ngo_goroutines 7\n"), nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testkit.Buffer{}
			fail := true
			r, _ := gateWithImport(t, func(ctx context.Context) ([]byte, error) {
				if fail {
					return tc.read(ctx)
				}
				return good, nil
			}, slog.New(slog.NewTextHandler(logs, nil)))
			for range 2 {
				fams := byName(t, r)
				for name := range fams {
					if strings.HasPrefix(name, SignerPrefix) {
						t.Errorf("%s served from a signer that could not be read", name)
					}
				}
				if got := value(t, fams["lockhttp_gate_signer_metrics_up"], "", ""); got != 0 {
					t.Errorf("lockhttp_gate_signer_metrics_up %v, want 0", got)
				}
				if fams["lockhttp_gate_signer_calls_total"] == nil || fams["go_goroutines"] == nil || fams["lockhttp_build_info"] == nil {
					t.Errorf("the gate's own families are missing: %v", keys(fams))
				}
			}
			// Through the handler too: 200 and the gate's page.
			rec := httptest.NewRecorder()
			r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			body := rec.Body.String()
			if rec.Code != http.StatusOK || !strings.Contains(body, "lockhttp_gate_signer_calls_total") || !strings.Contains(body, "lockhttp_gate_signer_metrics_up 0") {
				t.Errorf("the gate's page with the signer down: %d\n%.2000s", rec.Code, body)
			}
			fams := byName(t, r)
			if got := value(t, fams["lockhttp_gate_signer_metrics_failures_total"], "", ""); got != 4 {
				t.Errorf("lockhttp_gate_signer_metrics_failures_total %v after 4 failed scrapes, want 4", got)
			}
			if n := strings.Count(logs.String(), "the signer's metrics cannot be read"); n != 1 {
				t.Errorf("%d warnings for 4 failed scrapes, want 1:\n%s", n, logs)
			}
			// The signer back: its families again, up 1, the failures kept.
			fail = false
			fams = byName(t, r)
			if got := value(t, fams["lockhttp_gate_signer_metrics_up"], "", ""); got != 1 {
				t.Errorf("lockhttp_gate_signer_metrics_up %v once the signer is back, want 1", got)
			}
			if got := value(t, fams["lockhttp_signer_requests_total"], "outcome", SignIssued); got != 1 {
				t.Errorf("lockhttp_signer_requests_total{outcome=issued} %v once the signer is back, want 1", got)
			}
			if got := value(t, fams["lockhttp_gate_signer_metrics_failures_total"], "", ""); got != 4 {
				t.Errorf("lockhttp_gate_signer_metrics_failures_total %v, want the 4 kept", got)
			}
			if !strings.Contains(logs.String(), "the signer's metrics are read again") {
				t.Errorf("no line when the signer is read again:\n%s", logs)
			}
		})
	}
}

func keys(m map[string]*Family) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
