package metrics

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestParseRoundTrip: each process's families, written in the text format and parsed again,
// are the families gathered: names, help, types, labels, values and buckets.
func TestParseRoundTrip(t *testing.T) {
	for name, r := range processRegistries(t) {
		t.Run(name, func(t *testing.T) {
			fams, err := r.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var page bytes.Buffer
			WriteText(&page, fams)
			got, err := ParseText(page.Bytes())
			if err != nil {
				t.Fatalf("%v\n%s", err, page.Bytes())
			}
			if len(got) != len(fams) {
				t.Fatalf("%d families parsed, %d written", len(got), len(fams))
			}
			for i := range fams {
				if !reflect.DeepEqual(got[i], fams[i]) {
					t.Errorf("family %s:\nparsed  %+v\nwritten %+v", fams[i].Name, got[i], fams[i])
				}
			}
		})
	}
}

// TestParseGood: a page with every type, escapes, a trailing comma, a timestamp and blank lines
// is read as written.
func TestParseGood(t *testing.T) {
	page, err := os.ReadFile("testdata/parse/good-every-type.txt")
	if err != nil {
		t.Fatal(err)
	}
	fams, err := ParseText(page)
	if err != nil {
		t.Fatal(err)
	}
	c := Find(fams, "c_total")
	if c == nil || c.Type != Counter || c.Help != "A counter: \\ and \n." || len(c.Series) != 1 || c.Series[0].Value != 3 ||
		c.Series[0].Label("a") != "x\"y\\z\n" || c.Series[0].Label("b") != "2" {
		t.Errorf("c_total: %+v", c)
	}
	if g := Find(fams, "g"); g == nil || g.Type != Gauge || g.Series[0].Value != -1.5e-07 {
		t.Errorf("g: %+v", g)
	}
	if g := Find(fams, "g_other"); g == nil || g.Type != Untyped || !math.IsNaN(g.Series[0].Value) {
		t.Errorf("g_other: %+v", g)
	}
	h := Find(fams, "h")
	want := Series{Labels: []Label{{"k", "v"}}, Buckets: []Bucket{{Bound: 0.5, Count: 1}, {Bound: 1, Count: 2}}, Count: 2, Sum: 1.25}
	if h == nil || h.Type != Histogram || len(h.Series) != 1 || !reflect.DeepEqual(h.Series[0], want) {
		t.Errorf("h: %+v, want one series %+v", h, want)
	}
	s := Find(fams, "s")
	if s == nil || s.Type != Summary || len(s.Series) != 1 || s.Series[0].Count != 3 || s.Series[0].Sum != 0.02 ||
		!reflect.DeepEqual(s.Series[0].Buckets, []Bucket{{Bound: 0, Value: 0.001}, {Bound: 1, Value: 0.01}}) {
		t.Errorf("s: %+v", s)
	}
	if u := Find(fams, "u"); u == nil || !math.IsInf(u.Series[0].Value, 1) {
		t.Errorf("u: %+v", u)
	}
}

// TestParseBad: each bad page in testdata/parse is refused with the error its first line names
// (# want: …), which names the line.
func TestParseBad(t *testing.T) {
	files, _ := filepath.Glob("testdata/parse/bad-*.txt")
	if len(files) == 0 {
		t.Fatal("no bad pages")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			page, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(page), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("%s does not start with # want:", file)
			}
			fams, err := ParseText(page)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ParseText: %v (%d families), want an error with %q", err, len(fams), want)
			}
		})
	}
}

// TestParseBounds: a page over MaxTextBytes, or with more than MaxTextSamples samples, is
// refused whole.
func TestParseBounds(t *testing.T) {
	big := bytes.Repeat([]byte("# a comment line that takes room\n"), MaxTextBytes/32)
	if _, err := ParseText(big); err == nil || !strings.Contains(err.Error(), "over 1048576") {
		t.Errorf("a page of %d bytes: %v", len(big), err)
	}
	var many bytes.Buffer
	for i := 0; i <= MaxTextSamples; i++ {
		many.WriteString("x{i=\"")
		many.WriteString(strings.Repeat("a", i%7))
		many.WriteString(string(rune('a' + i%26)))
		many.WriteString(string(rune('a' + i/26%26)))
		many.WriteString(string(rune('a' + i/676%26)))
		many.WriteString("\"} 1\n")
	}
	_, err := ParseText(many.Bytes())
	if err == nil || !strings.Contains(err.Error(), "line 4097: over 4096 samples") {
		t.Errorf("a page of %d samples: %v", MaxTextSamples+1, err)
	}
	// MaxTextSamples itself is read.
	page := many.Bytes()[:bytes.LastIndex(bytes.TrimSuffix(many.Bytes(), []byte("\n")), []byte("\n"))+1]
	if fams, err := ParseText(page); err != nil || len(fams[0].Series) != MaxTextSamples {
		t.Errorf("a page of %d samples: %v", MaxTextSamples, err)
	}
}

// FuzzParseText: ParseText never panics, and what it reads it writes back to a page it reads
// the same (as WriteText writes it).
func FuzzParseText(f *testing.F) {
	files, _ := filepath.Glob("testdata/parse/*.txt")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		fams, err := ParseText(page)
		if err != nil {
			return
		}
		var once bytes.Buffer
		if err := WriteText(&once, fams); err != nil {
			t.Fatal(err)
		}
		again, err := ParseText(once.Bytes())
		if err != nil {
			t.Fatalf("ParseText reads a page it cannot read back written: %v\n%q\nwritten:\n%q", err, page, once.Bytes())
		}
		var twice bytes.Buffer
		WriteText(&twice, again)
		if !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatalf("written twice differs:\n%q\n%q", once.Bytes(), twice.Bytes())
		}
	})
}
