// Package traffic carries the gate's decisions to the terminal as they happen: the gate queues a
// summary of each audit record and sends them to the hub's host in batches, which keeps the
// latest in a Log for the terminal UI. It is a live view that drops entries rather than slow a
// request down: the audit is the record.
package traffic

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/display"
)

// Bounds of an entry's text fields (bytes; longer is cut on a character boundary).
const (
	maxURL   = 2 << 10
	maxText  = 512 // reason
	maxShort = 128 // id, event, container, agent, method, verdict, code, rule, ticket, approver
)

// Entry is one decision of the gate: an audit record without what the terminal does not show.
// Its JSON keys are the audit record's, so an audit line decodes into an Entry. Text fields come
// from agents' requests (masked by the gate): show them through display.Escape.
type Entry struct {
	Time      time.Time `json:"time"`
	Event     string    `json:"event"` // "request", "connect", "tunnel-request"
	ID        string    `json:"id"`
	Container string    `json:"container,omitempty"`
	Agent     string    `json:"agent,omitempty"`
	Method    string    `json:"method,omitempty"`
	URL       string    `json:"url,omitempty"`
	Verdict   string    `json:"verdict"` // FREE, ASK, DENY, or "" (refused before the policy was asked)
	Code      string    `json:"code"`    // E_… for a refusal, "" for what went out
	Rule      string    `json:"rule,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Status    int       `json:"status"`
	Ticket    string    `json:"ticket,omitempty"`
	Approver  string    `json:"approver,omitempty"`
}

// FromRecord is the entry of an audit record, its fields cut to the bounds above.
func FromRecord(r *audit.Record) Entry {
	return Entry{Time: r.Time, Event: cut(r.Event, maxShort), ID: cut(r.ID, maxShort), Container: cut(r.Container, maxShort),
		Agent: cut(r.Agent, maxShort), Method: cut(r.Method, maxShort), URL: cut(r.URL, maxURL), Verdict: cut(r.Verdict, maxShort),
		Code: cut(r.Code, maxShort), Rule: cut(r.Rule, maxShort), Reason: cut(r.Reason, maxText), Status: r.Status,
		Ticket: cut(r.Ticket, maxShort), Approver: cut(r.Approver, maxShort)}
}

// bounded is e with every field cut to the bounds, for entries that come over the wire.
func (e Entry) bounded() Entry {
	e.Event, e.ID, e.Container, e.Agent = cut(e.Event, maxShort), cut(e.ID, maxShort), cut(e.Container, maxShort), cut(e.Agent, maxShort)
	e.Method, e.URL, e.Verdict, e.Code = cut(e.Method, maxShort), cut(e.URL, maxURL), cut(e.Verdict, maxShort), cut(e.Code, maxShort)
	e.Rule, e.Reason, e.Ticket, e.Approver = cut(e.Rule, maxShort), cut(e.Reason, maxText), cut(e.Ticket, maxShort), cut(e.Approver, maxShort)
	return e
}

func cut(s string, n int) string { return display.Cut(s, n) }

// Refused reports whether the gate refused the request (it carries an E_ code).
func (e Entry) Refused() bool { return e.Code != "" }

// Asked reports whether the policy asked a human about it.
func (e Entry) Asked() bool { return e.Verdict == "ASK" }

// Line is the entry as one line of plain text, every field escaped: the time (local), the
// verdict, the status or the code, the container, the method, the URL, then the rule, the
// approver and, for a refusal, why.
//
//	14:03:07 FREE  200          dev  GET  https://example.com/  [reads]
//	14:03:09 DENY  E_DENY_HOST  dev  GET  https://evil.test/  [no rule] — the host is not in the policy
func (e Entry) Line() string {
	x := func(s string) string { return display.Escape(s, false) }
	verdict := e.Verdict
	if verdict == "" {
		verdict = "-"
	}
	what := strconv.Itoa(e.Status)
	if e.Code != "" {
		what = e.Code
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %-12s %s %s %s", e.Time.Local().Format("15:04:05"), x(verdict), x(what), dash(x(e.Container)),
		dash(x(e.Method)), dash(x(e.URL)))
	var extra []string
	if e.Rule != "" {
		extra = append(extra, x(e.Rule))
	}
	if e.Approver != "" {
		extra = append(extra, "by "+x(e.Approver))
	}
	if len(extra) > 0 {
		b.WriteString("  [" + strings.Join(extra, ", ") + "]")
	}
	if e.Refused() && e.Reason != "" {
		b.WriteString(" — " + x(e.Reason))
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Filter picks the entries a view shows.
type Filter int

// Filters, in the order the terminal's f key cycles through them.
const (
	All     Filter = iota // every decision
	Refused               // what the gate refused (an E_ code)
	Asks                  // what the policy asked a human about, and the humans' decisions
)

// Filters is every filter, in order.
var Filters = []Filter{All, Refused, Asks}

func (f Filter) String() string {
	switch f {
	case All:
		return "all"
	case Refused:
		return "refused"
	case Asks:
		return "asks"
	}
	return "Filter(" + strconv.Itoa(int(f)) + ")"
}

// Next is the filter after f, back to All after the last.
func (f Filter) Next() Filter { return Filters[(int(f)+1)%len(Filters)] }

// Match reports whether f shows e.
func (f Filter) Match(e Entry) bool {
	switch f {
	case Refused:
		return e.Refused()
	case Asks:
		return e.Asked()
	}
	return true
}

// ParseFilter reads a filter's name.
func ParseFilter(s string) (Filter, error) {
	for _, f := range Filters {
		if s == f.String() {
			return f, nil
		}
	}
	return All, fmt.Errorf("unknown filter %q; use all, refused or asks", s)
}

// Batch is what the gate sends to the hub: entries, oldest first, and how many it could not
// send since the last batch it delivered (its queue was full: the hub was away or slow).
type Batch struct {
	Entries []Entry `json:"entries"`
	Dropped int     `json:"dropped,omitempty"`
	// Sampled is how many forwarded requests the gate left out since the last batch: past
	// MaxForwardedPerSecond the live view shows refusals and asks only (the audit has them all).
	Sampled int `json:"sampled,omitempty"`
}
