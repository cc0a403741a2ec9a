package gate

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/gateapi"
	"github.com/lockhttp/lockhttp/internal/tracing"
)

// Status is what the gate's admin socket answers at GET /status (gateapi.Status).
type Status = gateapi.Status

// StatusInfo is what the gate's main knows and the gate does not.
type StatusInfo struct {
	Listen       string
	Started      time.Time
	ConsoleError *atomic.Pointer[string]
	// ConsoleChecked holds the time of the last policy fetch, in Unix nanoseconds.
	ConsoleChecked *atomic.Int64
	// AuditSink is the audit's database copy. Nil: none.
	AuditSink interface{ Status() audit.SinkStatus }
	// Metrics is the URL of the gate's metrics listener, or "".
	Metrics string
	// Traces is the trace exporter. Nil: none.
	Traces interface{ Status() tracing.Status }
	// Transparent is the gate's transparent address, or "".
	Transparent string
}

// StatusHandler serves GET /status.
func (g *Gate) StatusHandler(info StatusInfo) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := Status{Listen: info.Listen, Started: info.Started, Requests: g.idSeq.Load(), Metrics: info.Metrics,
			Goroutines: runtime.NumGoroutine(), Tunnels: g.tunnelCount(), HeldBytes: g.HeldBytes(), Transparent: info.Transparent}
		if ports := g.transparentPorts.Load(); ports != nil {
			st.TransparentPorts = *ports
		}
		if p := g.pol.Load(); p != nil {
			st.PolicyVersion, st.PolicyName, st.Containers = p.Version, p.Name, p.Containers()
			st.Budgets = g.budget.Usage(p)
		}
		if err := g.audit.Healthy(); err != nil {
			st.AuditError = err.Error()
		}
		st.UnrecordedAnswers = g.unrecorded.Load()
		if info.AuditSink != nil {
			ss := info.AuditSink.Status()
			st.AuditSink = &ss
		}
		if info.Traces != nil {
			ts := info.Traces.Status()
			st.Traces = &ts
		}
		if u, ok := g.audit.(interface{ Usage() audit.Usage }); ok {
			au := u.Usage()
			st.Audit = &au
		}
		st.Signer = "off"
		if g.certs != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			st.Signer = "ok"
			if err := g.certs.Health(ctx); err != nil {
				st.Signer = err.Error()
			}
			cancel()
		}
		if info.ConsoleError != nil {
			if e := info.ConsoleError.Load(); e != nil {
				st.ConsoleError = *e
			}
		}
		if info.ConsoleChecked != nil {
			if n := info.ConsoleChecked.Load(); n != 0 {
				st.ConsoleChecked = time.Unix(0, n).UTC()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	return mux
}
