package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/tracing"
	"github.com/lockhttp/lockhttp/internal/tracing/tracingtest"
)

// TestTracesOTLP: with --otlp-endpoint, the gate exports a span of every request to a real
// OTLP/HTTP collector: a child of the agent's span when the request named one (traceparent),
// with the decision its audit record holds, and no secret the agent put in the URL's query or in a
// header anywhere in the exported bytes.
func TestTracesOTLP(t *testing.T) {
	col := tracingtest.Start(t)
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startStackWith(t, fmt.Sprintf(metricsPolicy, port), []string{"--otlp-endpoint", col.URL}, nil)
	e := &askEnv{running: r, origin: rec, port: port}

	var b [16]byte
	rand.Read(b[:])
	secret := "s3cret" + hex.EncodeToString(b[:])
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	c := (&coreEnv{running: r}).client()
	get := func(path, traceparent string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://origin.test:%d%s?api_key=%s&q=1", port, path, secret), nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("X-Api-Key", secret)
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(gate.HeaderRequest)
	}
	denyStatus, denyID := get("/admin/users", "00-"+trace+"-00f067aa0ba902b7-01")
	freeStatus, freeID := get("/items", "00-"+trace+"-b7ad6b7169203331-01")
	_, badID := get("/items", "00-not-a-trace-01")
	if denyStatus != 403 || freeStatus != 200 || denyID == "" || freeID == "" || badID == "" {
		t.Fatalf("GET /admin/users %d (%s), GET /items %d (%s, %s)", denyStatus, denyID, freeStatus, freeID, badID)
	}
	// An ASK approved on the CLI: its span names the ticket.
	res := e.send("POST", "/items", "payload")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/items", port))
	if out, err := e.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	if got := <-res; got.status != 200 {
		t.Fatalf("the approved request: %+v", got)
	}

	byID := map[string]tracingtest.Span{}
	testkit.WaitFor(t, 20*time.Second, "the 4 requests' spans at the collector", func() bool {
		for _, s := range col.Spans() {
			byID[s.Attrs[tracing.AttrID].(string)] = s
		}
		return len(byID) >= 4
	})
	for _, c := range []struct {
		name, id, parent string
		verdict, code    string
		rule             string
		status           int64
		path             string
	}{
		{"the DENY", denyID, "00f067aa0ba902b7", "DENY", "E_RULE", "no-admin", 403, "/admin/users"},
		{"the FREE", freeID, "b7ad6b7169203331", "FREE", "", "", 200, "/items"},
	} {
		s, ok := byID[c.id]
		if !ok {
			t.Errorf("%s: no span for request %s", c.name, c.id)
			continue
		}
		audit := r.recordFor(c.id)
		if s.TraceID != trace || s.ParentID != c.parent {
			t.Errorf("%s: trace %s parent %s, want the agent's %s %s", c.name, s.TraceID, s.ParentID, trace, c.parent)
		}
		if s.Name != tracing.SpanName || s.Resource["service.name"] != tracing.ServiceName {
			t.Errorf("%s: span %q of %v", c.name, s.Name, s.Resource)
		}
		want := map[string]any{tracing.AttrVerdict: c.verdict, tracing.AttrStatus: c.status, tracing.AttrContainer: "local",
			tracing.AttrMethod: "GET", tracing.AttrHost: "origin.test", tracing.AttrEvent: "request",
			tracing.AttrURL: fmt.Sprintf("http://origin.test:%d%s", port, c.path)}
		if c.code != "" {
			want[tracing.AttrCode] = c.code
		}
		if c.rule != "" {
			want[tracing.AttrRule] = c.rule
		}
		for k, v := range want {
			if s.Attrs[k] != v {
				t.Errorf("%s: %s = %#v, want %#v", c.name, k, s.Attrs[k], v)
			}
		}
		// The span says what the audit record says.
		for k, field := range map[string]string{tracing.AttrVerdict: "verdict", tracing.AttrCode: "code", tracing.AttrRule: "rule"} {
			if v, _ := audit[field].(string); v != "" && s.Attrs[k] != v {
				t.Errorf("%s: %s = %#v, the audit record's %s %q", c.name, k, s.Attrs[k], field, v)
			}
		}
		if s.End.Before(s.Start) || s.Start.IsZero() {
			t.Errorf("%s: span from %v to %v", c.name, s.Start, s.End)
		}
	}
	if s := byID[badID]; s.ParentID != "" || s.TraceID == trace {
		t.Errorf("a malformed traceparent: trace %s parent %q, want a root span", s.TraceID, s.ParentID)
	}
	var ask tracingtest.Span
	for _, s := range byID {
		if s.Attrs[tracing.AttrTicket] == tk.ID {
			ask = s
		}
	}
	if ask.Attrs[tracing.AttrVerdict] != "ASK" || ask.Attrs[tracing.AttrMethod] != "POST" || ask.Attrs[tracing.AttrRule] != "ask-writes" {
		t.Errorf("no span of the approved ASK naming ticket %s: %+v", tk.ID, ask.Attrs)
	}
	raw := col.Raw()
	for _, leak := range []string{secret, "api_key", "payload", "Bearer"} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Errorf("the exported spans hold %q", leak)
		}
	}
	if !strings.Contains(string(raw), "no-admin") {
		t.Error("the check for secrets read no export")
	}
	// The doctor names the exporter and what it sent.
	out, _ := runDoctor(t, "--state", r.state)
	if !hasLine(out, "OK", "traces", "spans to "+col.URL) || !strings.Contains(out, "exported, 0 failed, 0 dropped") {
		t.Errorf("lockhttp doctor does not show the trace exporter:\n%s", out)
	}
}
