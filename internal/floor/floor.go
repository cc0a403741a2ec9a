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

// shown cuts agent input to maxShown bytes, on a rune boundary, for a reason.
// The caller quotes it with %q, which keeps the reason on one line.
func shown(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
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
