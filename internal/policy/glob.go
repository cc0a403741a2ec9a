package policy

import (
	"fmt"
	"strings"

	"github.com/lockhttp/lockhttp/internal/percent"
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
	// cut is the pattern with its own ;parameters cut, matched against the parameter-cut reading
	// of a path (cutPath) so that a free rule written with parameters keeps matching; nil when
	// the pattern has none, and then segs serve.
	cut []segment
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
	var err error
	if g.segs, err = compileSegs(text, pattern); err != nil {
		return glob{}, err
	}
	if hasParams(pattern) {
		if g.cut, err = compileSegs(text, cutPath(pattern)); err != nil {
			return glob{}, err
		}
	}
	return g, nil
}

// compileSegs compiles the segments of pattern; text is the pattern as written, for errors.
func compileSegs(text, pattern string) ([]segment, error) {
	var segs []segment
	for _, s := range strings.Split(pattern[1:], "/") {
		switch {
		case s == "*":
			segs = append(segs, segment{kind: segStar})
		case s == "**":
			segs = append(segs, segment{kind: segGlobstar})
		case strings.Contains(s, "**"):
			return nil, fmt.Errorf("path %q: ** must be a whole segment, as in /a/**/b", text)
		case strings.Contains(s, "*"):
			segs = append(segs, segment{kind: segWild, parts: strings.Split(s, "*")})
		default:
			segs = append(segs, segment{kind: segLiteral, lit: s})
		}
	}
	return segs, nil
}

// match reports whether the cleaned path (starting with "/") matches.
func (g *glob) match(path string) bool {
	return matchSegs(g.segs, path[1:], true)
}

// matchCut reports whether the parameter-cut reading of a path (cutPath) matches the pattern
// with its own parameters cut.
func (g *glob) matchCut(path string) bool {
	if g.cut != nil {
		return matchSegs(g.cut, path[1:], true)
	}
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

// CleanPath is the path as sent, cleaned: the escaped URL path with escapes of unreserved
// characters decoded, other escapes in upper case, dot segments resolved (also when
// percent-encoded) and repeated slashes folded. It is what a strict server serves; the request
// itself goes out unchanged.
//
// CleanPath is the first of several plausible readings of a path, one for each way an origin
// may route it, since the gate cannot know which way the origin behind a host takes:
//
//   - CleanPath: as sent, cleaned.
//   - cutPath: CleanPath with ";parameters" cut from every segment, as servlet containers
//     (Tomcat, Jetty, Spring) route: "/admin;x=1/users" is "/admin/users", and
//     "/public/..;/admin" is "/admin" (the "..;" segment is a dot-dot segment once its
//     parameter is cut).
//   - LoosePaths: CleanPath in lower case with encoded and back slashes read as separators, as a
//     server that folds case or decodes %2F routes; with parameters kept, cut as a servlet
//     container cuts them, and cut after the slashes are decoded.
//
// A restrictive rule (ask, deny) applies when it matches any reading: its patterns, lowered, are
// matched against each of LoosePaths, so that no way of writing a path steps around it. A free
// rule applies only when it matches every reading that routes differently: CleanPath and cutPath
// must each match one of its patterns (against cutPath, a pattern written with parameters is
// matched with its own parameters cut), so "/public/..;/admin" is not free under "/public/**"
// and falls through to the other rules. The folded readings are not required of a free rule:
// free patterns match case and %2F as written, and many APIs carry %2F as data within a segment.
func CleanPath(escaped string) string {
	clean, _ := cleanPath(escaped)
	return clean
}

// cleanPath is CleanPath, and whether the clean path has ;parameters (hasParams), found in the
// same pass for an ordinary path.
func cleanPath(escaped string) (clean string, params bool) {
	if escaped == "" {
		return "/", false
	}
	if ok, params := isClean(escaped); ok {
		return escaped, params
	}
	var b strings.Builder
	b.Grow(len(escaped) + 1)
	if escaped[0] != '/' {
		b.WriteByte('/')
	}
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if v, ok := percent.Escape(escaped, i); ok {
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
	clean = removeDots(b.String())
	return clean, hasParams(clean)
}

// LoosePaths are the lenient readings of a path that CleanPath has cleaned: each in lower case,
// with "%2F", "%5C" and '\' read as '/' and dot segments resolved again, and
//
//   - [0] with ";parameters" kept, as a server that knows nothing of parameters routes;
//   - [1] with parameters cut from every segment before the slashes are decoded, as servlet
//     containers route;
//   - [2] with parameters cut after the slashes are decoded, as a servlet container behind a
//     decoding proxy routes.
//
// A parameter runs from a ';' (or "%3B") to the end of its segment. A check that no way of
// writing the path may step around (a restrictive rule, an endpoint that always asks) matches if
// it matches any of them. All three are clean itself, and nothing is allocated, when clean has
// no ';', '%', '\' or upper case; they are equal when it has no parameter.
func LoosePaths(clean string) [3]string {
	f := foldPath(clean)
	if !hasParams(clean) {
		return [3]string{f, f, f}
	}
	return [3]string{f, foldPath(cutPath(clean)), cutPath(f)}
}

// foldPath is a cleaned path in lower case, with "%2F", "%5C" and '\' read as '/' and dot
// segments resolved again: LoosePaths with parameters kept. It returns clean itself when clean
// has no '%', '\' or upper case.
func foldPath(clean string) string {
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
	return removeDots(separators.Replace(strings.ToLower(clean)))
}

// separators reads encoded and back slashes, in a lowered path, as '/'.
var separators = strings.NewReplacer("%2f", "/", "%5c", "/", "\\", "/")

// cutPath is the parameter-cut reading of a cleaned (or folded) path: every segment cut at its
// first ';' or "%3B", then dot segments resolved again, as servlet containers route. Call it only
// when hasParams reports parameters: it allocates.
func cutPath(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if isParam(p, i) {
			j := strings.IndexByte(p[i:], '/')
			if j < 0 {
				break
			}
			i += j
		}
		b.WriteByte(p[i])
	}
	return removeDots(b.String())
}

// hasParams reports whether a path has a ';' or "%3B" that starts a parameter.
func hasParams(p string) bool {
	for i := 0; i < len(p); i++ {
		if isParam(p, i) {
			return true
		}
	}
	return false
}

func isParam(p string, i int) bool {
	return p[i] == ';' || p[i] == '%' && i+2 < len(p) && p[i+1] == '3' && (p[i+2] == 'B' || p[i+2] == 'b')
}

// isClean reports whether p is its own CleanPath and, if it is, whether it has a ';'.
func isClean(p string) (clean, params bool) {
	if p[0] != '/' {
		return false, false
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%':
			return false, false
		case '.':
			if p[i-1] == '/' { // "/." starts a dot segment or a dotfile: let removeDots decide
				return false, false
			}
		case '/':
			if i > 0 && p[i-1] == '/' {
				return false, false
			}
		case ';':
			params = true
		}
	}
	return true, params
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

func upper(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
