// Package metrics names every Prometheus metric lockhttp's processes export, so that names,
// labels and buckets stay the same wherever they are counted (docs/observability.md lists them),
// and serves them in Prometheus's text format 0.0.4 without a Prometheus client.
//
// Each process builds a Registry (the Go runtime's and the process's families included:
// runtime.go) and the families it counts: Gate, Tracing, Signer and SignerClient, Audit, Hub,
// Console, Notify. Their methods are safe on a nil receiver and then do nothing, so a package
// counts whether or not its process exports metrics. Counting is lock-free: atomic adds on
// counters and histogram buckets resolved once. Label values are bounded: containers, rules,
// budgets, channels and facades come from the policy or the code, never a host, a URL or a
// request's bytes. ParseText reads a page back, bounded, for the gate's import of the signer's
// families (ImportSigner).
package metrics

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Namespace prefixes every family.
const Namespace = "lockhttp"

// Registry is one process's metrics.
type Registry struct {
	mu         sync.Mutex
	names      map[string]bool // guarded by mu: the families registered, each once
	collectors []collector     // guarded by mu
	more       []*SignerImport // guarded by mu: another process's families served here (ImportSigner)
}

// NewRegistry returns a registry holding the Go runtime's and the process's families (go_*,
// process_*: runtime.go) and lockhttp_build_info for process (gate, console, signer) at version.
func NewRegistry(process, version string) *Registry {
	r := &Registry{names: map[string]bool{}}
	registerRuntime(r)
	info := newDesc(Namespace+"_build_info", "Always 1: the process and the build it runs.", Gauge, "process", "version")
	infoLabels := info.labelsOf([]string{process, version})
	r.register([]string{info.name}, collectFunc(func(out []Family) []Family {
		f := info.family(1)
		f.Series = append(f.Series, Series{Labels: infoLabels, Value: 1})
		return append(out, f)
	}))
	return r
}

// register adds c, which collects the families names, to r; a nil r registers nothing (the
// families then count for nobody). A name registered twice is a programming error: it panics.
func (r *Registry) register(names []string, c collector) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if r.names[n] {
			panic("metrics: family " + n + " registered twice")
		}
		r.names[n] = true
	}
	r.collectors = append(r.collectors, c)
}

// Gather returns the registry's families and those it imports (ImportSigner), sorted by name,
// each family's series sorted by their labels. A family named twice, a series twice in its
// family or an invalid label name is an error: the page would mislead a scraper.
func (r *Registry) Gather() ([]Family, error) {
	r.mu.Lock()
	cs := slices.Clone(r.collectors)
	more := slices.Clone(r.more)
	r.mu.Unlock()
	fams := make([]Family, 0, 64)
	for _, c := range cs {
		fams = c.collect(fams)
	}
	for _, s := range more {
		fams = s.collect(fams)
	}
	// A family with no series yet (a vector nothing was counted in) is left out, as Prometheus's
	// client leaves it out.
	fams = slices.DeleteFunc(fams, func(f Family) bool { return len(f.Series) == 0 })
	return fams, check(fams)
}

// check sorts fams and their series, and refuses a family named twice, an empty family of a
// vector left out, a series twice or an invalid label.
func check(fams []Family) error {
	slices.SortFunc(fams, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	for i, f := range fams {
		if i > 0 && fams[i-1].Name == f.Name {
			return fmt.Errorf("family %s gathered twice", f.Name)
		}
		if !validMetricName(f.Name) {
			return fmt.Errorf("invalid family name %q", f.Name)
		}
		for _, s := range f.Series {
			for _, l := range s.Labels {
				if !validLabelName(l.Name) {
					return fmt.Errorf("family %s: invalid label name %q", f.Name, l.Name)
				}
			}
		}
		slices.SortFunc(f.Series, func(a, b Series) int { return compareLabels(a.Labels, b.Labels) })
		for j := 1; j < len(f.Series); j++ {
			if compareLabels(f.Series[j-1].Labels, f.Series[j].Labels) == 0 {
				return fmt.Errorf("family %s: series %s twice", f.Name, labelString(f.Series[j].Labels))
			}
		}
	}
	return nil
}

// compareLabels orders label sets by their names and values, in the order they are written.
func compareLabels(a, b []Label) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := cmp.Or(strings.Compare(a[i].Name, b[i].Name), strings.Compare(a[i].Value, b[i].Value)); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

func labelString(ls []Label) string {
	var b []byte
	b = appendLabels(b, ls, "", "")
	if len(b) == 0 {
		return "{}"
	}
	return string(b)
}

// ContentType is the text format's media type, which Handler answers with.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// maxScrapes bounds the scrapes Handler serves at once; past it, 503.
const maxScrapes = 4

// scrapeTimeout bounds one scrape; past it, 503.
const scrapeTimeout = 10 * time.Second

// Handler serves the registry (Gather) in Prometheus's text format 0.0.4, at most 4 scrapes at
// once (503 past them) and each within 10 s (503 past it). A gathering error is answered 500,
// not a partial page; an import that cannot be read is left out of the page, not an error.
func (r *Registry) Handler() http.Handler {
	inFlight := make(chan struct{}, maxScrapes)
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
		default:
			http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", maxScrapes), http.StatusServiceUnavailable)
			return
		}
		fams, err := r.Gather()
		if err != nil {
			http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
			return
		}
		var buf bytes.Buffer
		buf.Grow(16 << 10)
		WriteText(&buf, fams)
		w.Header().Set("Content-Type", ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		w.Write(buf.Bytes())
	})
	return http.TimeoutHandler(h, scrapeTimeout, fmt.Sprintf("Exceeded configured timeout of %v.\n", scrapeTimeout))
}

// Path is where Serve answers.
const Path = "/metrics"

// Serve answers GET /metrics on l until ctx ends. Nothing else is served: the listener may face
// a monitoring network, and the metrics hold no secret and no request's content.
func (r *Registry) Serve(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, r.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 15 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// URL is the address of a metrics listener as a scrape target: http://ADDR/metrics, with an
// unspecified host (0.0.0.0, ::) read as loopback.
func URL(addr net.Addr) string {
	ap, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String() + Path
	}
	ip := ap.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(ap.Port)) + Path
}

// Buckets shared by the families.
var (
	// decisionBuckets: a decision takes microseconds (bench/RESULTS.md: ~3 µs).
	decisionBuckets = exponentialBuckets(2e-6, 4, 9) // 2 µs … 131 ms
	// networkBuckets: an upstream answer, a signer call, an fsync.
	networkBuckets = exponentialBuckets(0.0005, 2.5, 12) // 0.5 ms … 12 s
	// humanBuckets: a person answering a ticket.
	humanBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600}
	// batchBuckets: records per audit write.
	batchBuckets = exponentialBuckets(1, 2, 11) // 1 … 1024
)

func seconds(d time.Duration) float64 { return d.Seconds() }
