package gate

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/tracing"
)

// Status is what the gate's admin socket answers at GET /status: enough for lox and the doctor
// to tell whether the gate is up, deciding with which policy, and writing its audit.
type Status struct {
	Listen        string   `json:"listen"`
	PolicyVersion string   `json:"policy_version"`
	PolicyName    string   `json:"policy_name,omitempty"`
	Containers    []string `json:"containers,omitempty"`
	// Budgets is what each container has used of each [[budget]] of the policy.
	Budgets    []budget.Use `json:"budgets,omitempty"`
	AuditError string       `json:"audit_error,omitempty"`
	// UnrecordedAnswers is how many requests since start had a record that could not be
	// written: each forwarded answer was cut before its last byte, each of the gate's own was
	// sent as E_NO_AUDIT without a request id (a tunnel or a WebSocket session that ended
	// without its record counts too). The log names each (audit write failed).
	UnrecordedAnswers uint64 `json:"unrecorded_answers,omitempty"`
	// Audit is how much the audit takes, its budget and the disk's free space (nil when the
	// auditor does not say).
	Audit *audit.Usage `json:"audit,omitempty"`
	// AuditSink is the state of the audit's database copy (nil: none).
	AuditSink    *audit.SinkStatus `json:"audit_sink,omitempty"`
	ConsoleError string            `json:"console_error,omitempty"`
	// Signer is "off" without decryption, "ok" when the signer answers, else its error.
	Signer string `json:"signer"`
	// ConsoleChecked is when the gate last asked the console for its policy.
	ConsoleChecked time.Time `json:"console_checked"`
	Requests       uint64    `json:"requests"`
	Started        time.Time `json:"started"`
	// Goroutines, Tunnels and HeldBytes are what the gate holds now: its goroutines, the
	// hijacked client connections (CONNECT tunnels), and the body bytes held for decisions.
	Goroutines int   `json:"goroutines"`
	Tunnels    int   `json:"tunnels"`
	HeldBytes  int64 `json:"held_bytes"`
	// Metrics is the URL of the gate's Prometheus metrics, "" when it serves none.
	Metrics string `json:"metrics,omitempty"`
	// Traces is the trace exporter's state (nil: none, no -otlp-endpoint).
	Traces *tracing.Status `json:"traces,omitempty"`
	// Transparent is the gate's transparent address (-transparent), "" without one, and
	// TransparentPorts the TCP ports it serves there now (besides DNS on 53 and the proxy).
	Transparent      string `json:"transparent,omitempty"`
	TransparentPorts []int  `json:"transparent_ports,omitempty"`
}

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
