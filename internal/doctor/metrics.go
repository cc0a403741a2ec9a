package doctor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// MetricsFacts: one process's metrics listener, scraped once.
type MetricsFacts struct {
	Process string `json:"process"`
	URL     string `json:"url"`
	Err     string `json:"err,omitempty"`
	// Families is how many lockhttp_ families the page has.
	Families int `json:"families"`
}

// gatherMetrics scrapes each process's metrics URL (process → URL) once.
func gatherMetrics(ctx context.Context, urls map[string]string) []MetricsFacts {
	names := make([]string, 0, len(urls))
	for p := range urls {
		names = append(names, p)
	}
	sort.Strings(names)
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil}}
	var out []MetricsFacts
	for _, p := range names {
		m := MetricsFacts{Process: p, URL: urls[p]}
		out = append(out, scrape(ctx, c, m))
	}
	return out
}

func scrape(ctx context.Context, c *http.Client, m MetricsFacts) MetricsFacts {
	if m.URL == "" {
		m.Err = "the process reported no metrics URL"
		return m
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL, nil)
	if err != nil {
		m.Err = err.Error()
		return m
	}
	resp, err := c.Do(req)
	if err != nil {
		m.Err = unwrapURL(err).Error()
		return m
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		m.Err = "answered " + resp.Status
		return m
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "# TYPE lockhttp_") {
			m.Families++
		}
	}
	if m.Families == 0 {
		m.Err = "the page has no lockhttp_ family: is this lockhttp's metrics listener?"
	}
	return m
}

func assessMetrics(r *Report, f *Facts) {
	if f.Mode != "local" || f.Stack != "" {
		return
	}
	if len(f.Metrics) == 0 {
		r.add(OK, "metrics", "no metrics listener (lox run --metrics-listen 127.0.0.1:9464 serves Prometheus metrics; docs/observability.md)")
		return
	}
	for _, m := range f.Metrics {
		if m.Err != "" {
			r.add(Warn, "metrics", "the %s's metrics at %s: %s; fix: see the %s's log (its -metrics-listen)", m.Process, m.URL, m.Err, m.Process)
			continue
		}
		r.add(OK, "metrics", "the %s serves %d lockhttp families at %s", m.Process, m.Families, m.URL)
	}
}

// assessTraces reports the gate's trace exporter: where its spans go, what it exported and the
// last failure when it is the latest news.
func assessTraces(r *Report, f *Facts) {
	if f.Gate == nil || f.Gate.Status == nil {
		return
	}
	t := f.Gate.Status.Traces
	switch {
	case t == nil:
		r.add(OK, "traces", "no trace exporter (lox run --otlp-endpoint URL, or the gate's -otlp-endpoint, exports a span of every request; docs/observability.md)")
	case t.Failed > 0 && t.LastFail.After(t.LastOK):
		r.add(Warn, "traces", "spans to %s: %d exported, %d failed, %d dropped; the last export failed %s ago: %s; fix: check that the collector listens there (OTLP/HTTP)",
			t.Endpoint, t.Exported, t.Failed, t.Dropped, f.Now.Sub(t.LastFail).Round(time.Second), t.LastError)
	case t.Dropped > 0:
		r.add(Warn, "traces", "spans to %s: %d exported, %d dropped (the exporter fell behind the requests), %d failed", t.Endpoint, t.Exported, t.Dropped, t.Failed)
	default:
		r.add(OK, "traces", "spans to %s: %d exported, %d failed, %d dropped", t.Endpoint, t.Exported, t.Failed, t.Dropped)
	}
}

// assessNotify reports each [[notify]] channel of the approved policy and its deliveries.
func assessNotify(r *Report, f *Facts) {
	c := f.Console
	if c == nil || c.Status == nil {
		return
	}
	for _, ch := range c.Status.Notify {
		what := fmt.Sprintf("channel %q (%s to %s, %s)", ch.Name, ch.Kind, ch.Host, map[bool]string{true: "its replies decide tickets", false: "notifies only"}[ch.Human])
		counts := fmt.Sprintf("%d delivered, %d failed, %d dropped", ch.Delivered, ch.Failed, ch.Dropped)
		switch {
		case !ch.LastFail.IsZero() && ch.LastFail.After(ch.LastOK):
			r.add(Warn, "notify", "%s: %s; the last delivery failed %s ago: %s; fix: check the receiver (tickets still reach the terminal, lox and the phone page)",
				what, counts, f.Now.Sub(ch.LastFail).Round(time.Second), ch.LastError)
		case ch.Delivered == 0:
			r.add(OK, "notify", "%s: nothing sent yet", what)
		default:
			r.add(OK, "notify", "%s: %s, the last %s ago", what, counts, f.Now.Sub(ch.LastOK).Round(time.Second))
		}
	}
}
