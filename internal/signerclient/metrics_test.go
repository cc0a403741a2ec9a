package signerclient

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/signer"
)

// TestMetricsPage: the signer's GET /metrics over its socket, as the gate reads it for its own
// page: the signer's families there (its sign requests counted), and a signer that cannot answer
// an ErrUnavailable.
func TestMetricsPage(t *testing.T) {
	ctx := context.Background()
	h := startSigner(t, func(c *signer.ServerConfig) {
		reg := metrics.NewRegistry("signer", "test")
		c.Registry, c.Metrics = reg, metrics.NewSigner(reg)
	})
	c := h.client(t, nil)
	if _, err := c.Certificate(ctx, "example.com"); err != nil {
		t.Fatal(err)
	}
	page, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `lockhttp_signer_requests_total{outcome="issued"} 1`) {
		t.Fatalf("the signer's page:\n%.2000s", page)
	}

	// The gate's page with the signer's families, read over the socket at the scrape.
	gate := metrics.NewRegistry("gate", "test")
	metrics.ImportSigner(gate, metrics.SignerImportOptions{Read: c.Metrics})
	scrape := func() string {
		rec := httptest.NewRecorder()
		gate.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			t.Fatalf("the gate's page: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	if out := scrape(); !strings.Contains(out, `lockhttp_signer_requests_total{outcome="issued"} 1`) || !strings.Contains(out, "lockhttp_gate_signer_metrics_up 1") {
		t.Errorf("the gate's page:\n%.3000s", out)
	}
	h.down.Store(true)
	if out := scrape(); strings.Contains(out, "lockhttp_signer_requests_total") || !strings.Contains(out, "lockhttp_gate_signer_metrics_up 0") ||
		!strings.Contains(out, `lockhttp_build_info{process="gate"`) {
		t.Errorf("the gate's page with the signer answering 503:\n%.3000s", out)
	}

	cases := []struct {
		name string
		c    func(t *testing.T) *Client
		want string
	}{
		{"no socket", func(t *testing.T) *Client {
			c, err := New(Options{Socket: filepath.Join(shortDir(t), "none.sock")})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}, "none.sock"},
		{"5xx", func(t *testing.T) *Client { return c }, "503"},
		{"no registry", func(t *testing.T) *Client { return startSigner(t, nil).client(t, nil) }, "404"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c(t).Metrics(ctx)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want ErrUnavailable naming %s", err, tc.want)
			}
		})
	}
}
