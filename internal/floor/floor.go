// Package floor holds the network checks that every request passes, whatever the policy says.
package floor

import (
	"fmt"
	"strconv"
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

// MaxShown is how much of an agent's input a reason repeats where its caller names no shorter
// bound: a host, an authority, a media type.
const MaxShown = 80

// minHidden is the length from which a run of token characters with a digit in it is taken for
// a credential and not repeated: no reason may carry a secret, and a reason cannot ask the
// detector (which needs the policy) what is one.
const minHidden = 20

// maxDateDigits is the longest number a run of words may hold and still be shown: a date
// (20250825), as in a versioned name such as "code_execution_20250825".
const maxDateDigits = 8

// Shown is agent input as a reason repeats it, the one way every reason quotes a request's host,
// header, path, method or value: every run of 20 or more letters, digits and '_', '+', '/', '='
// with a digit in it replaced by "[N characters]" first, then cut to n bytes on a rune boundary
// ("..." marks the cut), then quoted as a Go string in printable ASCII (strconv.QuoteToASCII),
// which keeps the reason on one line and shows every other byte as an escape. Hiding comes
// before the cut, so that a cut never leaves the first bytes of a credential standing; n less
// than 1 is read as MaxShown. The work stops once the cut is reached.
func Shown(s string, n int) string {
	if n < 1 {
		n = MaxShown
	}
	s, cut := hideTokens(s, n)
	if len(s) > n {
		end := n
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		s, cut = s[:end], true
	}
	if cut {
		s += "..."
	}
	return strconv.QuoteToASCII(s)
}

func tokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '+' || c == '/' || c == '='
}

// HideTokens replaces every run of 20 or more letters, digits and '_', '+', '/', '=' with a digit
// in it by "[N characters]": what looks like a credential in a host or a name, for a record a
// person reads. A run made only of words is not one and stays (wordsOnly): a path such as
// "/v1/messages/count_tokens", a versioned name such as "code_execution_20250825".
func HideTokens(s string) string {
	out, _ := hideTokens(s, -1)
	return out
}

// hideTokens is HideTokens, stopping once more than limit bytes are written when limit is not
// negative (cut then reports that s went on); a run is always read whole, so that what is
// written of it is hidden or not as the whole run is.
func hideTokens(s string, limit int) (out string, cut bool) {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if limit >= 0 && b.Len()+i-last > limit {
			// What stands between the last hidden run and i is no credential: write what the
			// limit keeps of it.
			b.WriteString(s[last:min(i, last+max(0, limit+1-b.Len()))])
			return b.String(), true
		}
		if !tokenByte(s[i]) {
			i++
			continue
		}
		j, digit := i, false
		for j < len(s) && tokenByte(s[j]) {
			digit = digit || '0' <= s[j] && s[j] <= '9'
			j++
		}
		if j-i >= minHidden && digit && !wordsOnly(s[i:j]) {
			b.WriteString(s[last:i])
			fmt.Fprintf(&b, "[%d characters]", j-i)
			last = j
		}
		i = j
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), false
}

// wordsOnly reports whether every piece of run between '_', '/', '+' and '=' is a word: letters
// alone and in one case, a number of at most maxDateDigits digits, or at most 2 characters ("v1"). A random
// credential mixes letters and digits across a long piece; a run of words is a name a person
// wrote.
func wordsOnly(run string) bool {
	start := 0
	for i := 0; i <= len(run); i++ {
		if i < len(run) && run[i] != '_' && run[i] != '/' && run[i] != '+' && run[i] != '=' {
			continue
		}
		piece := run[start:i]
		start = i + 1
		if len(piece) <= 2 {
			continue
		}
		letters, digits, lower, upper := 0, 0, 0, 0
		for k := 0; k < len(piece); k++ {
			switch c := piece[k]; {
			case '0' <= c && c <= '9':
				digits++
			case 'a' <= c && c <= 'z':
				lower++
			case 'A' <= c && c <= 'Z':
				upper++
			}
			letters = len(piece) - digits
		}
		// A word is written in one case; base64 mixes them.
		if digits > 0 && (letters > 0 || digits > maxDateDigits) || lower > 0 && upper > 0 {
			return false
		}
	}
	return true
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
