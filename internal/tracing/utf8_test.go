package tracing

import (
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/tracing/tracingtest"
)

// TestExportNotUTF8: a request whose URL, agent or rule is not UTF-8 (the agent chose the URL's
// bytes) is exported with U+FFFD in their place, and does not fail the spans exported with it.
func TestExportNotUTF8(t *testing.T) {
	col := tracingtest.Start(t)
	reg := metrics.NewRegistry("gate", "v0")
	e, err := New(Options{Endpoint: col.URL, Metrics: metrics.NewTracing(reg), Batch: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	bad := record("bad")
	bad.URL, bad.Agent, bad.Rule = "http://h.test/p\xff\xfe?q", "a\xc3", "\xed\xa0\x80"
	e.Finished(record("good"), "")
	e.Finished(bad, "")
	run(e)() // Run and stop it: the stop exports both
	got := map[string]tracingtest.Span{}
	for _, s := range col.Spans() {
		got[s.Attrs[AttrID].(string)] = s
	}
	if st := e.Status(); len(got) != 2 || st.Exported != 2 {
		t.Fatalf("%d spans at the collector, want 2; %d exported, %d failed: %s", len(got), st.Exported, st.Failed, st.LastError)
	}
	for k, want := range map[string]string{AttrURL: "http://h.test/p\uFFFD\uFFFD", AttrAgent: "a\uFFFD", AttrRule: "\uFFFD\uFFFD\uFFFD"} {
		if v := got["bad"].Attrs[k]; v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
}
