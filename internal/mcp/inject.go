package mcp

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Phrases are the prompt-injection phrases marked in answers: text a tool result or a tool's
// description has no business holding, written to steer the model that reads it. The list is
// short and fixed on purpose; a mark tells a human where to look, it changes nothing, and no
// list of phrases can find every injection.
var Phrases = []string{
	"ignore previous instructions",
	"ignore all previous instructions",
	"ignore the previous instructions",
	"ignore prior instructions",
	"ignore all prior instructions",
	"ignore the above instructions",
	"disregard previous instructions",
	"disregard all previous instructions",
	"disregard your instructions",
	"forget your instructions",
	"forget all previous instructions",
	"new instructions:",
	"system prompt",
	"do not tell the user",
	"don't tell the user",
	"without telling the user",
	"<important>",
	"<system>",
	"</system>",
}

// injected returns the phrases s holds, compared without case, with every run of white space
// read as one space and typographic apostrophes as "'".
func injected(s []byte) []string {
	if len(s) < 8 {
		return nil
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		i += n
		switch {
		case unicode.IsSpace(r):
			if !space {
				b.WriteByte(' ')
			}
			space = true
			continue
		case r == '\u2019' || r == '\u2018' || r == '\u02bc':
			r = '\''
		default:
			r = unicode.ToLower(r)
		}
		space = false
		b.WriteRune(r)
	}
	t := b.String()
	var found []string
	for _, p := range Phrases {
		if strings.Contains(t, p) {
			found = append(found, p)
		}
	}
	return found
}
