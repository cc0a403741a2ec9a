// Package floor holds the network checks that every request passes, whatever the policy says.
package floor

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Check is the name of one floor check; it is reported in decisions as "floor:<check>".
type Check string

// The floor checks.
const (
	// IPLiteral refuses a host written as an IP address, in any encoding.
	IPLiteral Check = "ip-literal"
	// SingleLabel refuses a name without a dot.
	SingleLabel Check = "single-label"
	// LocalName refuses localhost and names under LocalSuffixes (*.local,
	// *.internal, ...). Names under .test are not refused: tests map them on
	// purpose.
	LocalName Check = "local-name"
	// Metadata refuses cloud metadata names and addresses.
	Metadata Check = "metadata"
	// DoH refuses DNS-over-HTTPS endpoints, by name, path or media type.
	DoH Check = "doh"
	// Port refuses a port that is missing, malformed or not allowed.
	Port Check = "port"
	// Malformed refuses a host that is not a plain host name.
	Malformed Check = "malformed-host"
	// Userinfo refuses a host that carries userinfo ("user@host").
	Userinfo Check = "userinfo"
	// Address refuses a name that resolved into a refused range.
	Address Check = "address"
	// OwnAddress refuses the gate's own listen address.
	OwnAddress Check = "own-address"
)

// Refusal says which check refused and why, in words an agent may read.
type Refusal struct {
	Check Check
	// Reason is public: it names the host (normalised, quoted with %q) and
	// what is wrong, on one line, with no secrets.
	Reason string
}

// Error returns "floor: <check>: <reason>".
func (r *Refusal) Error() string {
	return "floor: " + string(r.Check) + ": " + r.Reason
}

func refuse(c Check, format string, args ...any) *Refusal {
	return &Refusal{Check: c, Reason: fmt.Sprintf(format, args...)}
}

// maxShown bounds how much of an agent's input a reason repeats.
const maxShown = 80

// minHidden is the length from which a run of token characters with a digit in it is taken for
// a credential and not repeated: no reason may carry a secret, and a reason cannot ask the
// detector (which needs the policy) what is one.
const minHidden = 20

func shown(s string) string { return Shown(s) }

// Shown is agent input as a reason repeats it: cut to 80 bytes on a rune boundary, and every run
// of 20 or more letters, digits and '_', '+', '/', '=' with a digit in it replaced by "[N
// characters]". The caller quotes it with %q, which keeps the reason on one line. Every reason
// that quotes a request's host, header or value goes through it.
func Shown(s string) string {
	s = HideTokens(s)
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func tokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '+' || c == '/' || c == '='
}

// HideTokens replaces every run of 20 or more letters, digits and '_', '+', '/', '=' with a digit
// in it by "[N characters]": what looks like a credential in a host or a name, for a record a
// person reads.
func HideTokens(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !tokenByte(s[i]) {
			i++
			continue
		}
		j, digit := i, false
		for j < len(s) && tokenByte(s[j]) {
			digit = digit || '0' <= s[j] && s[j] <= '9'
			j++
		}
		if j-i >= minHidden && digit {
			b.WriteString(s[last:i])
			fmt.Fprintf(&b, "[%d characters]", j-i)
			last = j
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// joinInts formats ports for a reason.
func joinInts(ns []int) string {
	var b strings.Builder
	for i, n := range ns {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", n)
	}
	return b.String()
}
