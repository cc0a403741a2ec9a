// Package metrics names every Prometheus metric lockhttp's processes export, so that names,
// labels and buckets stay the same wherever they are counted (docs/observability.md lists them).
//
// Each process builds a Registry (the standard Go and process collectors included) and the
// families it counts: Gate, Tracing, Signer and SignerClient, Audit, Hub, Console, Notify. Their
// methods are safe on a nil receiver and then do nothing, so a package counts whether or not its
// process exports metrics. Label values are bounded: containers, rules, budgets, channels and
// facades come from the policy or the code, never a host, a URL or a request's bytes.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Namespace prefixes every family.
const Namespace = "lockhttp"

// Registry is one process's metrics.
type Registry struct {
	reg *prometheus.Registry

	mu   sync.Mutex
	more prometheus.Gatherers // guarded by mu: another process's families served here (ImportSigner)
}

// NewRegistry returns a registry holding the Go runtime's and the process's collectors and
// lockhttp_build_info for process (gate, console, signer) at version.
func NewRegistry(process, version string) *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1: the process and the build it runs."}, []string{"process", "version"})
	info.WithLabelValues(process, version).Set(1)
	reg.MustRegister(info)
	return &Registry{reg: reg}
}

// register adds cs to r; a nil r registers nothing (the families then count for nobody).
func (r *Registry) register(cs ...prometheus.Collector) {
	if r == nil {
		return
	}
	r.reg.MustRegister(cs...)
}

// Gather returns the registry's families and those it imports (ImportSigner).
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	r.mu.Lock()
	gs := append(prometheus.Gatherers{r.reg}, r.more...)
	r.mu.Unlock()
	return gs.Gather()
}

// Handler serves the registry (Gather) in Prometheus's text format (OpenMetrics when asked). A
// collector's error is answered 500, not a partial page; an import that cannot be read is left
// out of the page, not an error.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(prometheus.GathererFunc(r.Gather), promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError, MaxRequestsInFlight: 4,
		Timeout: 10 * time.Second, EnableOpenMetrics: true})
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
	decisionBuckets = prometheus.ExponentialBuckets(2e-6, 4, 9) // 2 µs … 131 ms
	// networkBuckets: an upstream answer, a signer call, an fsync.
	networkBuckets = prometheus.ExponentialBuckets(0.0005, 2.5, 12) // 0.5 ms … 12 s
	// humanBuckets: a person answering a ticket.
	humanBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600}
	// batchBuckets: records per audit write.
	batchBuckets = prometheus.ExponentialBuckets(1, 2, 11) // 1 … 1024
)

func seconds(d time.Duration) float64 { return d.Seconds() }
