package refusal

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// A refusal reaches the agent through what its client shows of an error answer, and many show
// little: pip, requests and urllib show the status line ("403 Client Error: Forbidden for
// url"), npm the status line and the "error" of a JSON body ("403 Forbidden - GET url -
// error"), git a push's side band only. So the status line's reason phrase carries the code and
// the advice, and the body takes the form the client reads.

// refusalForm is the form of a refusal's body.
type refusalForm uint8

const (
	formText refusalForm = iota // the plain-text body (body)
	formJSON                    // a JSON object (refusalJSON)
	formGit                     // git's receive-pack result, the text on its progress band (gitRefusal)
)

// formOf picks the form of the refusal of r, whose held body is held; every refusal's answer
// is shaped by it. A git push that asks for a side band gets git's result, a client that asks
// for JSON (npm asks for its registry documents) gets JSON, everyone else and r nil (no request
// could be read) get plain text.
func formOf(r *http.Request, held []byte) refusalForm {
	switch {
	case r == nil:
		return formText
	case gitSideBand(r, held):
		return formGit
	case acceptsJSON(r.Header.Values("Accept")):
		return formJSON
	}
	return formText
}

// maxAcceptRanges bounds how many media ranges of Accept are read.
const maxAcceptRanges = 32

// acceptsJSON reports whether the Accept header values name a JSON media type (application/json
// or any +json type) with a quality above zero and at least that of text/plain or text/*.
// Wildcards (*/*, application/*) are not a request for JSON: curl and most clients send */*.
func acceptsJSON(values []string) bool {
	var qJSON, qText float64
	n := 0
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			if n++; n > maxAcceptRanges {
				break
			}
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if s, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(s, 64); err != nil || q < 0 || q > 1 {
					continue
				}
			}
			typ, sub, _ := strings.Cut(mt, "/")
			switch {
			case typ != "*" && (sub == "json" || strings.HasSuffix(sub, "+json")):
				qJSON = max(qJSON, q)
			case mt == "text/plain" || mt == "text/*":
				qText = max(qText, q)
			}
		}
	}
	return qJSON > 0 && qJSON >= qText
}

// refusalDoc is the JSON form of a refusal: the plain-text body's fields, and in "error" one
// line of them for clients that print only that (npm).
type refusalDoc struct {
	Error    string      `json:"error"`
	Code     policy.Code `json:"code"`
	Rule     string      `json:"rule,omitempty"`
	Reason   string      `json:"reason"`
	WhatToDo string      `json:"what_to_do"`
	Method   string      `json:"method"`
	URL      string      `json:"url"`
	Ticket   string      `json:"ticket,omitempty"`
	Request  string      `json:"request"`
	AskRule  string      `json:"ask_for_a_rule"`
}

// refusalJSON is the JSON body of a refusal. Every part that came from the request goes through
// display.Escape, and encoding/json escapes what JSON needs.
func refusalJSON(q Request, d policy.Decision) []byte {
	rule := display.Escape(d.Rule, false)
	reason := display.Escape(d.Reason, false)
	doc := refusalDoc{
		Code: d.Code, Rule: rule, Reason: reason, WhatToDo: d.Code.Advice(),
		Method: display.Escape(q.Method, false), URL: display.Escape(q.URL, false),
		Ticket: q.Ticket, Request: q.ShownID(), AskRule: askForARule,
	}
	doc.Error = fmt.Sprintf("lockhttp refused this request (%s", d.Code)
	if rule != "" {
		doc.Error += ", rule " + rule
	}
	doc.Error += "): " + reason + ". What to do: " + doc.WhatToDo
	b, err := json.Marshal(doc)
	if err != nil {
		// Strings only: Marshal cannot fail.
		panic(err)
	}
	return append(b, '\n')
}

// maxPhrase bounds a reason phrase in bytes: every advice fits, and no client's status-line
// limit is near.
const maxPhrase = 512

// reasonPhrase is the reason phrase of a refusal with status: the status's own text, then the
// code, the rule when it is a plain name, and the advice, "Forbidden (lockhttp E_RULE, rule
// no-uploads: The policy refuses this request. ...)". It is fixed public text (the code's, a
// rule name from the policy), never the reason or anything else of the request, and a valid
// phrase (phraseText).
func reasonPhrase(status int, d policy.Decision) string {
	s := http.StatusText(status) + " (lockhttp " + string(d.Code)
	if plainName(d.Rule) {
		s += ", rule " + d.Rule
	}
	return phraseText(s+": "+d.Code.Advice(), maxPhrase-1) + ")"
}

// plainName reports whether rule is a name the reason phrase may carry: 1 to 64 letters, digits
// and . _ : -, as every built-in rule is.
func plainName(rule string) bool {
	if rule == "" || len(rule) > 64 {
		return false
	}
	for i := 0; i < len(rule); i++ {
		c := rule[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// phraseText makes s valid in a reason phrase in at most limit bytes: each character outside
// printable ASCII (a control, a line break, anything not ASCII) becomes '?', and text that is too
// long is cut at a space and marked "...".
func phraseText(s string, limit int) string {
	b := make([]byte, 0, min(len(s), limit))
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			r = '?'
		}
		b = append(b, byte(r))
	}
	if len(b) > limit {
		b = b[:limit-3]
		if i := strings.LastIndexByte(string(b), ' '); i > 0 {
			b = b[:i]
		}
		b = append(b, "..."...)
	}
	return string(b)
}
