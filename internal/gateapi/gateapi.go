// Package gateapi is what the gate answers about itself: its admin socket's GET /status (with
// its trace exporter's state) and the answer for its own name on the proxy, imported by the gate
// and by what reads its state (lox's stack), so that such a reader links no gate.
package gateapi

import (
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/budget"
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
	Traces *TraceStatus `json:"traces,omitempty"`
	// Transparent is the gate's transparent address (-transparent), "" without one, and
	// TransparentPorts the TCP ports it serves there now (besides DNS on 53 and the proxy).
	Transparent      string `json:"transparent,omitempty"`
	TransparentPorts []int  `json:"transparent_ports,omitempty"`
}

// TraceStatus is what the gate's trace exporter has done (-otlp-endpoint), for its /status and
// the doctor.
type TraceStatus struct {
	Endpoint string    `json:"endpoint"`
	Exported int64     `json:"exported"`
	Dropped  int64     `json:"dropped"`
	Failed   int64     `json:"failed"`
	LastOK   time.Time `json:"last_ok,omitzero"`
	LastFail time.Time `json:"last_fail,omitzero"`
	// LastError is the last failed export's error.
	LastError string `json:"last_error,omitempty"`
}

// SelfAnswer is what the gate answers for its own name (http://lockhttp.internal/, or any
// request in a CONNECT to lockhttp.internal): proof for lockhttp doctor and for a person with
// curl that the client reaches the gate and, when Decrypted, trusts the lockhttp CA.
type SelfAnswer struct {
	Gate          string `json:"gate"` // always "lockhttp"
	Decrypted     bool   `json:"decrypted"`
	Container     string `json:"container"`
	PolicyVersion string `json:"policy_version"`
	Request       string `json:"request"` // the audit record's id
}
