// Package propose learns free rules from what humans were asked: from the ASK records of the
// gate's audit over a period and the humans' decisions on their tickets, it proposes one rule for
// each container, host, method and path pattern that humans approved more than once and never
// denied, with what it would have freed and what else it would let through.
package propose

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Observation is one record of the gate's audit, as propose reads it (docs/audit.md names the
// fields). Only ASK records of a request are learnt from; every other record is counted and
// left.
type Observation struct {
	Time      time.Time
	Event     string
	ID        string
	Container string
	Method    string
	URL       string
	Verdict   string
	Code      string
	Rule      string
	Ticket    string
	Approver  string
}

// Decision is a human's answer on one ticket, from the hub's state or the console's audit.
type Decision struct {
	Ticket   string
	Approved bool
	// By names the facade and the person ("terminal:alice", "cli:root").
	By string
	At time.Time
	// Kind, Container, Method, URL and Created describe the ticket's request, for a ticket the
	// audit of the period holds no record of (the agent never sent it again after the hold
	// ended). Empty: the decision only completes what the audit says.
	Kind      string
	Container string
	Method    string
	URL       string
	Created   time.Time
}

// Config is what a Learner needs.
type Config struct {
	// Name names the policy file in the diffs.
	Name string
	// Text is the approved policy's text: the one the gate decides with. Proposals are checked
	// against it and written as additions to it.
	Text []byte
	// Since and Until bound the period: an ask outside [Since, Until) is not learnt from. Zero:
	// unbounded.
	Since, Until time.Time
	// Container proposes for this container alone. Empty: every container.
	Container string
}

// Bounds of what a Learner keeps: past them it counts what it could not keep and says so
// (Result.Truncated), and proposes from what it kept.
const (
	maxShapes  = 50_000  // distinct container × host × method × path asked
	maxTickets = 200_000 // tickets whose request or decision is kept
	maxQueries = 16      // distinct query strings counted per path
	maxRefs    = 200_000 // tickets kept with the paths they asked about, in all
)

// events are the audit events of one request, decided by its method and path.
var events = map[string]bool{
	"request": true, "tunnel-request": true, "transparent-request": true,
	"transparent-tunnel-request": true, "websocket": true,
}

// key names one request as a rule decides it: container, host, method and cleaned path.
type key struct {
	container, host, method, path string
}

// shape is what was asked of one key in the period.
type shape struct {
	key         key
	asks        int
	first, last time.Time
	tickets     []string  // the tickets its asks waited on (each once, as read in a row)
	queries     []string  // its distinct query strings, at most maxQueries
	examples    []example // the first requests, with their URLs as recorded
	noTicket    int       // asks that opened no ticket (no console, the ask limit, ...)
}

type example struct {
	url, ticket string
	at          time.Time
}

// outcome is what a human answered on a ticket.
type outcome struct {
	approved bool
	by       string
}

// Learner reads observations and decisions and proposes rules. It is not safe for concurrent
// use; Result may be called once.
type Learner struct {
	cfg Config
	pol *policy.Policy
	doc *policy.Document

	shapes    map[key]*shape
	reqOf     map[string]key     // ticket → the request it was opened for (learnt from or not)
	recorded  map[string]outcome // ticket → the decision its records show (approver and code)
	decisions map[string]Decision
	// summarised are the requests of summaries of denied asks (past the audit's rate, the
	// gate records one summary, with the first request's URL, for many refusals): each is a
	// request a human denied, whatever its ticket.
	summarised map[key]bool
	skipped    map[string]int // why an ask was not learnt from → how many
	read, asks int
	refs       int // tickets kept in shapes
	fromHub    int // tickets learnt from whose requests the audit held no record of
	truncated  int // observations or decisions past the bounds
	done       bool
}

// New compiles the approved policy and returns a Learner. An approved policy that does not load
// is an error (it would not be the one the gate decides with).
func New(cfg Config) (*Learner, error) {
	doc, err := policy.Decode(cfg.Name, cfg.Text)
	if err != nil {
		return nil, err
	}
	pol, err := doc.Compile()
	if err != nil {
		return nil, err
	}
	return &Learner{cfg: cfg, pol: pol, doc: doc, shapes: map[key]*shape{}, reqOf: map[string]key{},
		recorded: map[string]outcome{}, decisions: map[string]Decision{}, summarised: map[key]bool{}, skipped: map[string]int{}}, nil
}

// Why an ask is not learnt from: the Result counts each.
const (
	skipConnect   = "a CONNECT decided at the domain: a free rule naming CONNECT opens the tunnel unseen, so it is never proposed"
	skipEvent     = "not the record of one request (a summary, a DNS query, a session)"
	skipURL       = "a URL that does not read as http(s)://host/path"
	skipFloor     = "a host or path the floor refuses"
	skipMasked    = "a path the audit shows masked or clipped (a credential or a long value stood there): what stood there is not known"
	skipGlob      = "a path with a '*', which a rule cannot name as written"
	skipMethod    = "a method a rule cannot name"
	skipNow       = "decided otherwise by the approved policy now (free, or refused)"
	skipContainer = "a container the approved policy's [sources] does not name"
	skipPeriod    = "outside the period"
	skipScope     = "another container than the one asked for"
)

// Observe reads one record of the gate's audit.
func (l *Learner) Observe(o Observation) {
	l.read++
	if o.Verdict != "ASK" {
		return // learning is ask and record: what went out or was refused teaches nothing
	}
	l.asks++
	l.observe(o, false)
}

// observe takes one ask; synthetic marks a ticket's request the audit held no record of.
func (l *Learner) observe(o Observation, synthetic bool) {
	if o.Event == "summary" && (o.Code == "E_DENIED" || o.Code == "E_EXFIL_SUSPECT") {
		// Denials past the audit's rate: the first one's request is known, the others' by their
		// tickets (the hub's or the console's decisions) only.
		if k, why := l.read1(o); why == "" || why == skipNow || why == skipContainer || why == skipScope || why == skipPeriod {
			if len(l.summarised) < maxShapes {
				l.summarised[k] = true
			}
		}
	}
	if !events[o.Event] {
		why := skipEvent
		if o.Event == "connect" || o.Event == "transparent-connect" {
			why = skipConnect
		}
		l.skipped[why]++
		return
	}
	k, why := l.read1(o)
	if why == "" || why == skipNow || why == skipContainer || why == skipScope || why == skipPeriod {
		// A request that reads as one: its ticket's decision is known by its request, whether or
		// not it is learnt from, so that a denial of it is never freed.
		if o.Ticket != "" && len(l.reqOf) < maxTickets {
			if _, seen := l.reqOf[o.Ticket]; !seen {
				l.reqOf[o.Ticket] = k
			}
		} else if o.Ticket != "" {
			l.truncated++
		}
	}
	if o.Ticket != "" && o.Approver != "" && !synthetic {
		// The record of a request a human decided: passed (no code) or refused (E_DENIED, or
		// E_EXFIL_SUSPECT for a denied ask of the heuristics).
		if len(l.recorded) < maxTickets {
			if _, seen := l.recorded[o.Ticket]; !seen {
				l.recorded[o.Ticket] = outcome{approved: o.Code == "", by: o.Approver}
			}
		} else {
			l.truncated++
		}
	}
	if why != "" {
		l.skipped[why]++
		return
	}
	s := l.shapes[k]
	if s == nil {
		if len(l.shapes) >= maxShapes {
			l.truncated++
			return
		}
		s = &shape{key: k, first: o.Time, last: o.Time}
		l.shapes[k] = s
	}
	s.asks++
	if o.Time.Before(s.first) {
		s.first = o.Time
	}
	if o.Time.After(s.last) {
		s.last = o.Time
	}
	if o.Ticket != "" {
		switch {
		case slices.Contains(s.tickets[max(0, len(s.tickets)-8):], o.Ticket):
		case l.refs < maxRefs:
			s.tickets = append(s.tickets, o.Ticket)
			l.refs++
		default:
			l.truncated++
		}
	} else {
		s.noTicket++
	}
	if u, err := url.Parse(o.URL); err == nil && len(s.queries) < maxQueries && !slices.Contains(s.queries, u.RawQuery) {
		s.queries = append(s.queries, u.RawQuery)
	}
	if synthetic {
		l.fromHub++
	}
	if len(s.examples) < 3 && !s.hasExample(o.URL, o.Ticket) {
		s.examples = append(s.examples, example{url: o.URL, ticket: o.Ticket, at: o.Time})
	}
}

// hasExample reports whether the request of ticket (or, with none, url) is an example already:
// two asks of one URL on two tickets are two examples.
func (s *shape) hasExample(u, ticket string) bool {
	for _, e := range s.examples {
		if ticket != "" && e.ticket == ticket || ticket == "" && e.url == u {
			return true
		}
	}
	return false
}

// read1 reads an ask as the rule that would decide it: its key, or why it is not learnt from.
// A key is returned with skipNow, skipContainer, skipScope and skipPeriod: the request reads,
// it is only not learnt from.
func (l *Learner) read1(o Observation) (key, string) {
	if strings.Contains(o.URL, "…[clipped: ") {
		return key{}, skipMasked
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.User != nil {
		return key{}, skipURL
	}
	host, ref := floor.Host(u.Hostname())
	if ref != nil || floor.Name(host) != nil {
		return key{}, skipFloor
	}
	method := strings.ToUpper(o.Method)
	if method == "CONNECT" {
		return key{}, skipConnect
	}
	if !knownMethod(method) {
		return key{}, skipMethod
	}
	escaped := u.EscapedPath()
	if escaped == "" {
		escaped = "/"
	}
	if !strings.HasPrefix(escaped, "/") {
		return key{}, skipURL
	}
	if strings.ContainsAny(escaped, "[]") || strings.Contains(strings.ToUpper(escaped), "%5B") {
		return key{}, skipMasked // the audit's masks are "[kind:hash]", escaped in a path
	}
	path := policy.CleanPath(escaped)
	if strings.Contains(path, "*") {
		return key{}, skipGlob
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return key{}, skipURL // never in a path url.EscapedPath writes; refused should one be
		}
	}
	if floor.Request(method, path, nil) != nil {
		return key{}, skipFloor
	}
	k := key{container: o.Container, host: host, method: method, path: path}
	switch {
	case !l.cfg.Since.IsZero() && o.Time.Before(l.cfg.Since), !l.cfg.Until.IsZero() && !o.Time.Before(l.cfg.Until):
		return k, skipPeriod
	case l.cfg.Container != "" && o.Container != l.cfg.Container:
		return k, skipScope
	case !l.pol.HasContainer(o.Container):
		return k, skipContainer
	}
	if d := l.pol.Evaluate(policy.Request{Host: host, Method: method, Path: path, Container: o.Container}); d.Verdict != policy.Ask {
		return k, skipNow
	}
	return k, ""
}

// knownMethods are the methods a rule may name, CONNECT aside.
var knownMethods = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "TRACE",
	"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH", "QUERY"}

func knownMethod(m string) bool {
	for _, k := range knownMethods {
		if k == m {
			return true
		}
	}
	return false
}

// Decided reads a human's decision on a ticket. A later decision on the same ticket (the same
// one read from two sources) replaces nothing.
func (l *Learner) Decided(d Decision) {
	if d.Ticket == "" {
		return
	}
	if _, seen := l.decisions[d.Ticket]; seen {
		return
	}
	if len(l.decisions) >= maxTickets {
		l.truncated++
		return
	}
	l.decisions[d.Ticket] = d
}
