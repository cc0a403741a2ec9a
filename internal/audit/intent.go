package audit

import (
	"sort"
	"time"
)

// EventIntent is the event of the record the gate writes when a request is about to go to its
// origin, before its first byte does: the request's id, its decision and what it asks for, with
// no outcome yet. The request's own record (event request, tunnel-request, connect, …, same id)
// follows with its outcome; an intent that nothing of its id follows is a request whose outcome
// was never written (the gate stopped, killed, while it was out). See docs/audit.md, "Intents".
const EventIntent = "intent"

// Intent is the intent record of the request whose record r is, as it stands when the request
// goes out at now: its id, time (the request's arrival), container, agent, method, URL,
// verdict, code, rule, reason, policy, ticket, approver, score, findings and stream; duration
// the time from its arrival to its going out, and detail naming the event of the record that
// will complete it. No status, no sizes: nothing has come back yet.
func Intent(r *Record, now time.Time) Record {
	return Record{Time: r.Time, Event: EventIntent, ID: r.ID, Container: r.Container, Agent: r.Agent,
		Method: r.Method, URL: r.URL, Verdict: r.Verdict, Code: r.Code, Rule: r.Rule, Reason: r.Reason,
		Policy: r.Policy, Duration: now.Sub(r.Time), Detail: intentDetail(r.Event), Ticket: r.Ticket,
		Approver: r.Approver, Score: r.Score, Findings: r.Findings, Stream: r.Stream}
}

// intentDetail is an intent's detail: which record completes it. The events the gate writes are
// few; another is said in the same words, built once per call.
func intentDetail(event string) string {
	switch event {
	case "request":
		return "going out; its outcome is the request record of this id"
	case "tunnel-request":
		return "going out; its outcome is the tunnel-request record of this id"
	case "connect":
		return "going out; its outcome is the connect record of this id"
	case "transparent-request":
		return "going out; its outcome is the transparent-request record of this id"
	case "transparent-tunnel-request":
		return "going out; its outcome is the transparent-tunnel-request record of this id"
	case "transparent-connect":
		return "going out; its outcome is the transparent-connect record of this id"
	}
	return "going out; its outcome is the " + event + " record of this id"
}

// maxOpenIntents bounds the intents Outcomes keeps waiting for their outcome: a gate holds at
// most a few thousand requests out at once, so more open at one time come from a log of many
// kills, and are counted (Outcomes.Dropped) rather than kept.
const maxOpenIntents = 1 << 16

// Outcomes pairs the intent records of a log, read in order, with the records that complete
// them: a record of the same id (a summary's ids included) that is not an intent. What is left
// open at the end went out and has no outcome in the log: the gate stopped before writing it
// (killed, or a crash of the machine), or, at the end of a running gate's log, it is still out.
// The zero value is ready to use.
type Outcomes struct {
	open    map[string]OpenIntent
	Intents int // intent records seen
	Dropped int // intents not kept: more than maxOpenIntents were open at once
}

// OpenIntent is an intent no record of its outcome followed: where it is in the log.
type OpenIntent struct {
	ID   string
	File string // the day file's base name (or the source's name)
	Line int    // its line in the file, from 1
	Time string // its "time", as written
	URL  string // its "url", as written
}

// See takes one record: its event, id, the ids of a summary, and where it is.
func (o *Outcomes) See(event, id string, ids []string, file string, line int, time, url string) {
	if event == EventIntent {
		if id == "" {
			return
		}
		o.Intents++
		if o.open == nil {
			o.open = map[string]OpenIntent{}
		}
		if len(o.open) >= maxOpenIntents {
			o.Dropped++
			return
		}
		o.open[id] = OpenIntent{ID: id, File: file, Line: line, Time: time, URL: url}
		return
	}
	if len(o.open) == 0 {
		return
	}
	delete(o.open, id)
	for _, x := range ids {
		delete(o.open, x)
	}
}

// Open is the intents left open, in the order of the log (file, then line).
func (o *Outcomes) Open() []OpenIntent {
	out := make([]OpenIntent, 0, len(o.open))
	for _, x := range o.open {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	return out
}
