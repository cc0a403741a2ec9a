package propose

import "strings"

// Class is the kind of an id-like path segment: the only segments a proposal generalises.
type Class string

// The id-like classes. A segment is of at most one; any other segment is literal text and is
// never generalised.
const (
	// Number: 1 to 64 ASCII digits ("42", "20261203").
	Number Class = "number"
	// UUID: 8-4-4-4-12 hexadecimal digits, all of one case ("3f2a9c1b-0d4e-4f5a-9b6c-7d8e9f0a1b2c").
	UUID Class = "uuid"
	// Hex: 7 to 64 hexadecimal digits with at least one digit 0-9 and one letter a-f, the letters
	// all of one case: a commit id ("4b0a97a"), a content hash. A word written in the letters a-f
	// ("facade", "decade") has no digit and stays literal.
	Hex Class = "hex"
	// Base64URL: 16 to 128 characters of A-Z, a-z, 0-9, '-' and '_' with at least one digit, one
	// lower-case and one upper-case letter, and no run of five lower-case letters: a random id
	// ("Zk3pQ9vL2mX7tR4w"). A slug ("getting-started-v2") has no upper-case letter and a name
	// ("GettingStartedV2") has words in it: both stay literal.
	Base64URL Class = "base64url"
)

// words names the class with its article: "a number", "a UUID", "an id" (ids of two classes).
func (c Class) words() string {
	switch c {
	case Number:
		return "a number"
	case UUID:
		return "a UUID"
	case Hex:
		return "a hex id"
	case Base64URL:
		return "a base64url id"
	}
	return "an id"
}

// classify returns the class of one path segment as the cleaned path writes it, or "" when it
// is not id-like. A segment with a percent escape, a ';', a '.', or any other character is
// never id-like.
func classify(seg string) Class {
	n := len(seg)
	if n == 0 || n > 128 {
		return ""
	}
	var digits, lowerHex, upperHex, lower, upper, other, dash, run, word int
	for i := 0; i < n; i++ {
		c := seg[i]
		if 'a' <= c && c <= 'z' {
			run++
			word = max(word, run)
		} else {
			run = 0
		}
		switch {
		case '0' <= c && c <= '9':
			digits++
		case 'a' <= c && c <= 'f':
			lowerHex++
			lower++
		case 'A' <= c && c <= 'F':
			upperHex++
			upper++
		case 'g' <= c && c <= 'z':
			lower++
		case 'G' <= c && c <= 'Z':
			upper++
		case c == '-':
			dash++
		case c == '_':
			other++
		default:
			return ""
		}
	}
	switch {
	case digits == n && n <= 64:
		return Number
	case isUUID(seg):
		return UUID
	case n >= 7 && n <= 64 && digits > 0 && digits+lowerHex+upperHex == n && (lowerHex == 0) != (upperHex == 0):
		return Hex
	case n >= 16 && digits > 0 && lower > 0 && upper > 0 && word < 5:
		return Base64URL
	}
	return ""
}

// isUUID reports whether s is 8-4-4-4-12 hexadecimal digits, all letters of one case.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	lower, upper := false, false
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
			continue
		}
		switch {
		case '0' <= c && c <= '9':
		case 'a' <= c && c <= 'f':
			lower = true
		case 'A' <= c && c <= 'F':
			upper = true
		default:
			return false
		}
	}
	return !(lower && upper)
}

// generalise returns the pattern of a cleaned path with its one id-like segment written "*",
// that segment's index (1 for the first) and class; when the path has no id-like segment, or
// more than one, it returns the path itself, 0 and "".
func generalise(path string) (pattern string, index int, class Class) {
	segs := strings.Split(path[1:], "/")
	at := -1
	for i, s := range segs {
		if c := classify(s); c != "" {
			if at >= 0 {
				return path, 0, "" // two id-like segments: generalising one is not enough
			}
			at, class = i, c
		}
	}
	if at < 0 {
		return path, 0, ""
	}
	segs[at] = "*"
	return "/" + strings.Join(segs, "/"), at + 1, class
}
