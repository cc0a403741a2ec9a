package policy

import (
	"fmt"
	"strings"
)

// segKind is how one pattern segment matches one path segment.
type segKind uint8

const (
	segLiteral  segKind = iota // the exact text
	segStar                    // "*": any one segment
	segGlobstar                // "**": zero or more segments
	segWild                    // text with '*' inside: '*' matches within the segment
)

type segment struct {
	kind  segKind
	lit   string   // segLiteral
	parts []string // segWild: the text between the stars
}

// glob is a compiled path pattern. Matching does no allocation and no regexp.
type glob struct {
	text string
	segs []segment
}

// compileGlob compiles a path pattern such as "/*/*.git/git-receive-pack" or "/v1/**". fold lowers
// the literal text, for patterns matched case-insensitively.
func compileGlob(pattern string, fold bool) (glob, error) {
	if !strings.HasPrefix(pattern, "/") {
		return glob{}, fmt.Errorf("path %q must start with /", pattern)
	}
	if strings.ContainsAny(pattern, "?#") {
		return glob{}, fmt.Errorf("path %q: paths match the URL path only, not the query; remove ? and #", pattern)
	}
	for _, c := range pattern {
		if c <= ' ' || c == 0x7f {
			return glob{}, fmt.Errorf("path %q: spaces and control characters are not allowed; percent-encode them", pattern)
		}
	}
	text := pattern
	if fold {
		pattern = strings.ToLower(pattern)
	}
	g := glob{text: text}
	for _, s := range strings.Split(pattern[1:], "/") {
		switch {
		case s == "*":
			g.segs = append(g.segs, segment{kind: segStar})
		case s == "**":
			g.segs = append(g.segs, segment{kind: segGlobstar})
		case strings.Contains(s, "**"):
			return glob{}, fmt.Errorf("path %q: ** must be a whole segment, as in /a/**/b", text)
		case strings.Contains(s, "*"):
			g.segs = append(g.segs, segment{kind: segWild, parts: strings.Split(s, "*")})
		default:
			g.segs = append(g.segs, segment{kind: segLiteral, lit: s})
		}
	}
	return g, nil
}

// match reports whether the cleaned path (starting with "/") matches.
func (g *glob) match(path string) bool {
	return matchSegs(g.segs, path[1:], true)
}

// matchSegs matches pattern segments against the rest of a path (segments separated by '/').
// more reports whether there is one more path segment (possibly empty) in rest.
func matchSegs(segs []segment, rest string, more bool) bool {
	for len(segs) > 0 {
		s := segs[0]
		if s.kind == segGlobstar {
			if len(segs) == 1 {
				return true
			}
			// Try the remaining pattern at every later segment boundary.
			if matchSegs(segs[1:], rest, more) {
				return true
			}
			for more {
				i := strings.IndexByte(rest, '/')
				if i < 0 {
					return false
				}
				rest = rest[i+1:]
				if matchSegs(segs[1:], rest, true) {
					return true
				}
			}
			return false
		}
		if !more {
			return false
		}
		seg, next, hasNext := strings.Cut(rest, "/")
		if !matchSegment(&s, seg) {
			return false
		}
		segs, rest, more = segs[1:], next, hasNext
	}
	return !more
}

func matchSegment(s *segment, seg string) bool {
	switch s.kind {
	case segLiteral:
		return s.lit == seg
	case segStar:
		return true
	case segWild:
		return wildMatch(s.parts, seg)
	}
	return false
}

// wildMatch matches seg against parts joined by '*'.
func wildMatch(parts []string, seg string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(seg, first) {
		return false
	}
	seg = seg[len(first):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(seg, p)
		if i < 0 {
			return false
		}
		seg = seg[i+len(p):]
	}
	return strings.HasSuffix(seg, last)
}

// CleanPath is the path that rules match: the escaped URL path with escapes of unreserved
// characters decoded, other escapes in upper case, dot segments resolved (also when
// percent-encoded) and repeated slashes folded. It is what a server most likely serves; the
// request itself goes out unchanged.
func CleanPath(escaped string) string {
	if escaped == "" {
		return "/"
	}
	if isClean(escaped) {
		return escaped
	}
	var b strings.Builder
	b.Grow(len(escaped) + 1)
	if escaped[0] != '/' {
		b.WriteByte('/')
	}
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c == '%' && i+2 < len(escaped) && ishex(escaped[i+1]) && ishex(escaped[i+2]) {
			v := unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
			if isUnreserved(v) {
				b.WriteByte(v)
			} else {
				b.WriteByte('%')
				b.WriteByte(upper(escaped[i+1]))
				b.WriteByte(upper(escaped[i+2]))
			}
			i += 2
			continue
		}
		b.WriteByte(c)
	}
	return removeDots(b.String())
}

// loosePath is the path that restrictive (ask and deny) rules match: CleanPath lowered, with
// encoded and back slashes read as separators, so that a server that folds case or decodes %2F
// cannot be used to step around an ask or deny rule.
func loosePath(clean string) string {
	needs := false
	for i := 0; i < len(clean); i++ {
		c := clean[i]
		if c == '\\' || c == '%' || ('A' <= c && c <= 'Z') {
			needs = true
			break
		}
	}
	if !needs {
		return clean
	}
	s := strings.ToLower(clean)
	s = strings.NewReplacer("%2f", "/", "%5c", "/", "\\", "/").Replace(s)
	return removeDots(s)
}

func isClean(p string) bool {
	if p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%':
			return false
		case '.':
			if p[i-1] == '/' { // "/." starts a dot segment or a dotfile: let removeDots decide
				return false
			}
		case '/':
			if i > 0 && p[i-1] == '/' {
				return false
			}
		}
	}
	return true
}

// removeDots resolves "." and ".." segments (RFC 3986 5.2.4) and folds repeated slashes.
func removeDots(p string) string {
	segs := strings.Split(p, "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		switch s {
		case ".":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "":
			if i == len(segs)-1 && len(out) > 0 {
				out = append(out, "") // keep one trailing slash
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
