package framing

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A fixture is one testdata file: a few "# key: value" or "# comment" lines, then the bytes, written
// as the inside of a Go string literal (\r, \n, \t, \", \\, \xHH) over as many lines as reads well;
// the file's own line breaks are not part of the bytes.
type fixture struct {
	name   string
	kind   Kind // "" when the bytes are to be accepted ("# kind: ok")
	tunnel bool
	data   []byte
}

func loadFixtures(t testing.TB, dir string) []fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.txt"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in testdata/%s: %v", dir, err)
	}
	var out []fixture
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f := fixture{name: strings.TrimSuffix(filepath.Base(p), ".txt")}
		lines := strings.Split(string(raw), "\n")
		i := 0
		for ; i < len(lines) && strings.HasPrefix(lines[i], "#"); i++ {
			k, v, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(lines[i], "#")), ":")
			switch k {
			case "kind":
				if v = strings.TrimSpace(v); v != "ok" {
					f.kind = Kind(v)
				}
			case "tunnel":
				f.tunnel = strings.TrimSpace(v) == "true"
			}
		}
		s, err := strconv.Unquote(`"` + strings.Join(lines[i:], "") + `"`)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		f.data = []byte(s)
		out = append(out, f)
	}
	return out
}

// splitHead cuts b after its first CRLF CRLF; with none, all of b is the head.
func splitHead(b []byte) (head, rest []byte) {
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		return b[:i+4], b[i+4:]
	}
	return b, nil
}

// checkReason asserts that a Reason is public-text safe: one line of printable ASCII, short.
func checkReason(t *testing.T, e *Error) {
	t.Helper()
	if e.Reason == "" || len(e.Reason) > 200 {
		t.Errorf("reason %q: want 1 to 200 bytes", e.Reason)
	}
	for i := range len(e.Reason) {
		if c := e.Reason[i]; c < 0x20 || c >= 0x7f {
			t.Errorf("reason %q: byte 0x%02x is not printable ASCII", e.Reason, c)
			break
		}
	}
	if strings.ToLower(e.Reason[:1]) != e.Reason[:1] {
		t.Errorf("reason %q: want a lowercase start", e.Reason)
	}
}
