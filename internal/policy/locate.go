package policy

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// locator maps key paths of a TOML document to the line they are written on, so that validation
// errors can name a line. It reads the subset of TOML that policy files use (tables, arrays of
// tables, dotted and quoted keys, multi-line arrays and strings); a key it cannot place gets the
// line of its nearest placed parent, or none.
type locator struct {
	lines map[string]int
	// plain maps a key path without array-of-tables indexes (as the TOML decoder names keys)
	// to the lines it appears on, in order.
	plain map[string][]int
}

func locKey(path []string) string { return strings.Join(path, "\x00") }

func newLocator(src string) *locator {
	l := &locator{lines: make(map[string]int), plain: make(map[string][]int)}
	aot := make(map[string]int)
	var table []string
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.HasPrefix(line, "[[") {
			end := strings.Index(line, "]]")
			if end < 0 {
				continue
			}
			name := within(aot, keyParts(line[2:end]))
			k := locKey(name)
			idx := aot[k]
			aot[k] = idx + 1
			table = append(name, itoa(idx))
			l.set(table, i+1)
			continue
		}
		if line[0] == '[' {
			end := strings.LastIndex(line, "]")
			if end < 0 {
				continue
			}
			table = within(aot, keyParts(line[1:end]))
			l.set(table, i+1)
			continue
		}
		eq := keyEnd(line)
		if eq < 0 {
			continue
		}
		path := append(append([]string{}, table...), keyParts(line[:eq])...)
		l.set(path, i+1)
		var plain []string
		for j, p := range path {
			if j > 0 && isIndex(p) {
				continue
			}
			plain = append(plain, p)
		}
		pk := locKey(plain)
		l.plain[pk] = append(l.plain[pk], i+1)
		// Skip the continuation lines of a multi-line value.
		st := valueState{}
		st.scan(line[eq+1:])
		for st.open() && i+1 < len(lines) {
			i++
			st.scan(lines[i])
		}
	}
	return l
}

// within places a table's name under the arrays of tables it is written in: the [[mcp.rule]]
// after the second [[mcp]] is mcp, 1, rule. aot counts the tables of each array so far, keyed
// by its placed name.
func within(aot map[string]int, name []string) []string {
	out := make([]string, 0, len(name)+2)
	for i, part := range name {
		out = append(out, part)
		if i == len(name)-1 {
			break
		}
		if n := aot[locKey(out)]; n > 0 {
			out = append(out, itoa(n-1)) // the array's last table so far
		}
	}
	return out
}

func (l *locator) set(path []string, line int) {
	k := locKey(path)
	if _, ok := l.lines[k]; !ok {
		l.lines[k] = line
	}
}

// line returns the line of path, or of its nearest parent that has one, or 0.
func (l *locator) line(path ...string) int {
	for n := len(path); n > 0; n-- {
		if v, ok := l.lines[locKey(path[:n])]; ok {
			return v
		}
	}
	return 0
}

func isIndex(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// plainLine returns the line of the n-th occurrence (0-based) of a key path named without
// array indexes, or 0.
func (l *locator) plainLine(path []string, n int) int {
	lines := l.plain[locKey(path)]
	if n < len(lines) {
		return lines[n]
	}
	return 0
}

// keyEnd returns the index of the '=' that ends the key of a key/value line, or -1.
func keyEnd(line string) int {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '=':
			return i
		case c == '#':
			return -1
		}
	}
	return -1
}

// keyParts splits a dotted TOML key, removing quotes and spaces.
func keyParts(key string) []string {
	var parts []string
	var cur strings.Builder
	var quote byte
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' && i+1 < len(key) {
				i += unescape(&cur, key[i+1:])
			} else if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '.':
			parts = append(parts, cur.String())
			cur.Reset()
		case c == ' ' || c == '\t':
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String())
}

// unescape writes the character of the escape that rest begins with (what follows a '\\' in a
// basic string: "n", "u00FC", ...) and returns how many bytes of rest it read. An escape it
// does not know stands for its first character.
func unescape(b *strings.Builder, rest string) int {
	switch c := rest[0]; c {
	case 'u', 'U':
		n := 4
		if c == 'U' {
			n = 8
		}
		if len(rest) > n {
			if v, err := strconv.ParseUint(rest[1:1+n], 16, 32); err == nil && utf8.ValidRune(rune(v)) {
				b.WriteRune(rune(v))
				return 1 + n
			}
		}
	case 'b', 't', 'n', 'f', 'r', 'e':
		b.WriteByte("\b\t\n\f\r\x1b"[strings.IndexByte("btnfre", c)])
		return 1
	}
	b.WriteByte(rest[0]) // '"', '\\' and what TOML does not know
	return 1
}

// valueState follows brackets and strings across the lines of one value.
type valueState struct {
	depth int
	multi string // the open multi-line string delimiter, if any
}

func (s *valueState) open() bool { return s.depth > 0 || s.multi != "" }

func (s *valueState) scan(text string) {
	for i := 0; i < len(text); i++ {
		if s.multi != "" {
			if strings.HasPrefix(text[i:], s.multi) {
				i += len(s.multi) - 1
				s.multi = ""
			} else if text[i] == '\\' && s.multi == `"""` {
				i++
			}
			continue
		}
		c := text[i]
		switch c {
		case '#':
			return
		case '[', '{':
			s.depth++
		case ']', '}':
			s.depth--
		case '"', '\'':
			delim := text[i : i+1]
			if strings.HasPrefix(text[i:], strings.Repeat(delim, 3)) {
				s.multi = strings.Repeat(delim, 3)
				i += 2
				continue
			}
			for i++; i < len(text); i++ {
				if text[i] == '\\' && c == '"' {
					i++
				} else if text[i] == c {
					break
				}
			}
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
