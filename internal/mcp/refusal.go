package mcp

import (
	"encoding/json"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// RefusalCode is the JSON-RPC error code of the gate's refusals: in the range -32000 to -32019
// that the 2026-07-28 revision leaves to implementations, and used by no SDK.
const RefusalCode = -32010

// Refusal is what the model reads when the gate refuses a message or holds it for a human: the
// code and its advice, the rule and the reason, the ticket to wait on.
type Refusal struct {
	Code   policy.Code
	Rule   string
	Reason string // escaped for display here
	Ticket string
	// RetryAfter is the seconds after which a retry may pass (E_PENDING, E_BUDGET); zero: none
	// said.
	RetryAfter int
}

// refusalData is the refusal in the error's data, for clients that show it.
type refusalData struct {
	Code       policy.Code `json:"code"`
	Rule       string      `json:"rule,omitempty"`
	Reason     string      `json:"reason"`
	WhatToDo   string      `json:"what_to_do"`
	Ticket     string      `json:"ticket,omitempty"`
	RetryAfter int         `json:"retry_after,omitempty"`
}

// text is the refusal in one line: "lockhttp refused this call (E_RULE, rule no-delete): the
// reason. What to do: the advice".
func (r Refusal) text() string {
	s := "lockhttp refused this call (" + string(r.Code)
	if r.Rule != "" {
		s += ", rule " + display.Escape(r.Rule, false)
	}
	s += "): " + display.Escape(r.Reason, false) + ". What to do: " + r.Code.Advice()
	if r.Ticket != "" {
		s += " (ticket " + display.Escape(r.Ticket, false) + ")"
	}
	return s
}

func (r Refusal) data() refusalData {
	return refusalData{Code: r.Code, Rule: display.Escape(r.Rule, false), Reason: display.Escape(r.Reason, false),
		WhatToDo: r.Code.Advice(), Ticket: display.Escape(r.Ticket, false), RetryAfter: r.RetryAfter}
}

// idJSON is the id to echo: as written, or null when there is none (a body that could not be
// read).
func idJSON(id ID) json.RawMessage {
	if id == nil {
		return json.RawMessage("null")
	}
	return json.RawMessage(id)
}

// Error is the JSON-RPC error response to id that carries the refusal: code RefusalCode, the
// refusal in one line as the message, and in data.lockhttp its parts.
func (r Refusal) Error(id ID) []byte {
	type errObj struct {
		Code    int                    `json:"code"`
		Message string                 `json:"message"`
		Data    map[string]refusalData `json:"data"`
	}
	return marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   errObj          `json:"error"`
	}{"2.0", idJSON(id), errObj{RefusalCode, r.text(), map[string]refusalData{"lockhttp": r.data()}}})
}

// ToolResult is a tools/call result for id with isError set and the refusal as its text: what a
// client hands the model as the tool's own answer, where some clients show an error's message
// to no one.
func (r Refusal) ToolResult(id ID) []byte {
	type content struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type result struct {
		Content []content              `json:"content"`
		IsError bool                   `json:"isError"`
		Meta    map[string]refusalData `json:"_meta"`
	}
	return marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  result          `json:"result"`
	}{"2.0", idJSON(id), result{[]content{{"text", r.text()}}, true, map[string]refusalData{"lockhttp": r.data()}}})
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Strings, numbers and JSON the lexer has read: Marshal cannot fail.
		panic(err)
	}
	return b
}

// Style is how a refused tools/call is answered.
type Style uint8

const (
	AsError      Style = iota // a JSON-RPC error (Refusal.Error)
	AsToolResult              // a result with isError (Refusal.ToolResult); other methods get an error
)

// Answer is the whole answer to a request body whose messages are refused: one response for
// each refused message that is a request, as JSON (one object, or an array for a batch) or, with
// sse, as an event stream of one event a response. refused says whether the i-th message is
// refused and how; a message that could not be read but has an id counts as a request. A body
// none of whose requests could be read (a finding about the body as a whole, or a message
// without an id that is neither a notification nor a response) gets one error with a null id,
// as JSON-RPC answers a body it cannot parse; refused is asked about it with i = -1. nil:
// nothing to answer (notifications and responses alone), which Streamable HTTP answers 202
// Accepted with no body.
func Answer(b *Body, refused func(i int) (Refusal, bool), style Style, sse bool) []byte {
	var msgs [][]byte
	requests, invalid := 0, false
	for i, m := range b.Messages {
		if m.Kind == Invalid && m.ID == nil {
			invalid = true
		}
		// A message that could not be read but has an id is answered too: its client waits on
		// that id.
		if m.Kind != Request && (m.Kind != Invalid || m.ID == nil) {
			continue
		}
		requests++
		r, ok := refused(i)
		if !ok {
			continue
		}
		if style == AsToolResult && m.Method == "tools/call" {
			msgs = append(msgs, r.ToolResult(m.ID))
		} else {
			msgs = append(msgs, r.Error(m.ID))
		}
	}
	if requests == 0 && (invalid || b.unreadable()) {
		if r, ok := refused(-1); ok {
			msgs = append(msgs, r.Error(nil))
		}
	}
	switch {
	case len(msgs) == 0:
		return nil
	case sse:
		var out []byte
		for _, m := range msgs {
			out = append(out, "event: message\ndata: "...)
			out = append(out, m...)
			out = append(out, "\n\n"...)
		}
		return out
	case b.Batch && requests > 0:
		out := []byte{'['}
		for i, m := range msgs {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, m...)
		}
		return append(out, ']')
	}
	return msgs[0]
}

// unreadable reports whether a finding names the body as a whole.
func (b *Body) unreadable() bool {
	for _, f := range b.Findings {
		if f.Message == -1 {
			return true
		}
	}
	return false
}
