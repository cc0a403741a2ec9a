package contentcoding

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
)

// encode applies codings to plain in order (the first is applied first), as a client would for
// "Content-Encoding: codings[0], codings[1], ...".
func encode(tb testing.TB, plain []byte, codings ...string) []byte {
	tb.Helper()
	for _, c := range codings {
		plain = encodeOne(tb, plain, c)
	}
	return plain
}

func encodeOne(tb testing.TB, plain []byte, coding string) []byte {
	tb.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip", "x-gzip":
		w = gzip.NewWriter(&buf)
	case "deflate":
		w = zlib.NewWriter(&buf)
	case "br":
		w = brotli.NewWriterLevel(&buf, brotli.BestSpeed)
	case "raw-deflate": // deflate without the zlib wrapper, which HTTP's deflate is not
		w, _ = flate.NewWriter(&buf, flate.DefaultCompression)
	default:
		tb.Fatalf("encode: no encoder for %q", coding)
	}
	if _, err := w.Write(plain); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestCodings(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want []string
	}{
		{"none", http.Header{}, nil},
		{"one", http.Header{"Content-Encoding": {"gzip"}}, []string{"gzip"}},
		{"list in order applied", http.Header{"Content-Encoding": {"gzip, br"}}, []string{"gzip", "br"}},
		{"several lines", http.Header{"Content-Encoding": {"deflate", "gzip"}}, []string{"deflate", "gzip"}},
		{"case and space", http.Header{"Content-Encoding": {" GZip ,BR "}}, []string{"gzip", "br"}},
		{"identity dropped", http.Header{"Content-Encoding": {"identity"}}, nil},
		{"identity among others", http.Header{"Content-Encoding": {"Identity, gzip, identity"}}, []string{"gzip"}},
		{"empty elements dropped", http.Header{"Content-Encoding": {", ,gzip,,"}}, []string{"gzip"}},
		{"key not canonical", http.Header{"content-encoding": {"br"}}, []string{"br"}},
		{"unknown kept", http.Header{"Content-Encoding": {"zstd"}}, []string{"zstd"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Codings(tc.h); !slices.Equal(got, tc.want) {
				t.Errorf("Codings = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	plain := []byte(strings.Repeat(`{"model":"claude","messages":[{"role":"user","content":"hello"}]}`, 20))
	gz := encode(t, plain, "gzip")
	br := encode(t, plain, "br")
	zl := encode(t, plain, "deflate")
	gzbr := encode(t, plain, "gzip", "br")
	badCRC := slices.Clone(gz)
	badCRC[len(badCRC)-8] ^= 0xff
	const limit = 1 << 20
	tests := []struct {
		name     string
		body     []byte
		codings  []string
		limit    int64
		want     []byte // on success
		errIn    string // "": success; else in the error, which must not be ErrTooLarge
		tooLarge bool   // ErrTooLarge
	}{
		{name: "no codings", body: plain, want: plain},
		{name: "empty body, no codings", body: []byte{}, want: []byte{}},
		{name: "identity header", body: plain, codings: Codings(http.Header{"Content-Encoding": {"identity"}}), want: plain},
		{name: "gzip", body: gz, codings: []string{"gzip"}, want: plain},
		{name: "x-gzip", body: gz, codings: []string{"x-gzip"}, want: plain},
		{name: "deflate is zlib", body: zl, codings: []string{"deflate"}, want: plain},
		{name: "br", body: br, codings: []string{"br"}, want: plain},
		{name: "gzip then br", body: gzbr, codings: []string{"gzip", "br"}, want: plain},
		{name: "gzip then br, header", body: gzbr, codings: Codings(http.Header{"Content-Encoding": {"gzip, identity, BR"}}), want: plain},
		{name: "br then gzip", body: encode(t, plain, "br", "gzip"), codings: []string{"br", "gzip"}, want: plain},
		{name: "deflate then gzip then br", body: encode(t, plain, "deflate", "gzip", "br"), codings: []string{"deflate", "gzip", "br"}, want: plain},
		{name: "MaxCodings stacked", body: encode(t, plain, "gzip", "gzip", "gzip", "gzip"), codings: []string{"gzip", "gzip", "gzip", "gzip"}, want: plain},
		{name: "gzip members", body: append(encode(t, []byte("ab"), "gzip"), encode(t, []byte("cd"), "gzip")...), codings: []string{"gzip"}, want: []byte("abcd")},
		{name: "gzip of nothing", body: encode(t, nil, "gzip"), codings: []string{"gzip"}, want: []byte{}},
		{name: "br of nothing", body: encode(t, nil, "br"), codings: []string{"br"}, want: []byte{}},
		{name: "exactly the limit", body: gz, codings: []string{"gzip"}, limit: int64(len(plain)), want: plain},

		{name: "more than MaxCodings", body: encode(t, plain, "gzip", "gzip", "gzip", "gzip", "gzip"), codings: []string{"gzip", "gzip", "gzip", "gzip", "gzip"}, errIn: "5 content codings stacked; at most 4"},
		{name: "unknown coding", body: plain, codings: []string{"zstd"}, errIn: `the content coding "zstd" is not one the gate reads (gzip, deflate, br)`},
		{name: "unknown coding under a known one", body: encode(t, plain, "gzip"), codings: []string{"compress", "gzip"}, errIn: `"compress" is not one`},
		{name: "unknown coding over a known one", body: gz, codings: []string{"gzip", "zstd"}, errIn: `"zstd" is not one`},
		{name: "long unknown coding is cut", body: plain, codings: []string{strings.Repeat("x", 100)}, errIn: `"` + strings.Repeat("x", 32) + `…"`},
		{name: "identity given to Decode", body: plain, codings: []string{"identity"}, errIn: `"identity" is not one`},
		{name: "coding not lower case", body: gz, codings: []string{"GZIP"}, errIn: `"GZIP" is not one`},
		{name: "codings in the wrong order", body: gzbr, codings: []string{"br", "gzip"}, errIn: "gzip body cannot be read"},
		{name: "deflate without zlib", body: encode(t, plain, "raw-deflate"), codings: []string{"deflate"}, errIn: "cannot be read as zlib"},
		{name: "not gzip", body: plain, codings: []string{"gzip"}, errIn: "gzip body cannot be read"},
		{name: "not br", body: plain, codings: []string{"br"}, errIn: "br body cannot be read"},
		{name: "empty body, gzip", body: []byte{}, codings: []string{"gzip"}, errIn: "gzip body cannot be read"},
		{name: "empty body, deflate", body: []byte{}, codings: []string{"deflate"}, errIn: "deflate body cannot be read"},
		{name: "empty body, br", body: []byte{}, codings: []string{"br"}, errIn: "br body cannot be read"},
		{name: "gzip checksum wrong", body: badCRC, codings: []string{"gzip"}, errIn: "checksum"},
		{name: "bytes after gzip", body: append(slices.Clone(gz), "tail"...), codings: []string{"gzip"}, errIn: "gzip body cannot be read"},
		{name: "zero bytes after gzip", body: append(slices.Clone(gz), 0, 0, 0, 0), codings: []string{"gzip"}, errIn: "gzip body cannot be read"},
		{name: "bytes after deflate", body: append(slices.Clone(zl), "tail"...), codings: []string{"deflate"}, errIn: "4 bytes after the compressed stream"},
		{name: "bytes after br", body: append(slices.Clone(br), "tail"...), codings: []string{"br"}, errIn: "br body cannot be read"},
		{name: "many bytes after br", body: append(slices.Clone(br), make([]byte, 100<<10)...), codings: []string{"br"}, errIn: "br body"},
		{name: "one byte over the limit", body: gz, codings: []string{"gzip"}, limit: int64(len(plain)) - 1, tooLarge: true},
		{name: "over the limit in the inner stage", body: gzbr, codings: []string{"gzip", "br"}, limit: int64(len(gz)), tooLarge: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.limit
			if l == 0 {
				l = limit
			}
			got, err := Decode(tc.body, tc.codings, l)
			switch {
			case tc.tooLarge:
				if !errors.Is(err, ErrTooLarge) || got != nil {
					t.Fatalf("Decode = %d bytes, %v; want ErrTooLarge", len(got), err)
				}
			case tc.errIn != "":
				if err == nil {
					t.Fatalf("Decode = %d bytes, want an error containing %q", len(got), tc.errIn)
				}
				if got != nil {
					t.Errorf("error, yet %d bytes", len(got))
				}
				if errors.Is(err, ErrTooLarge) {
					t.Errorf("error %v is ErrTooLarge", err)
				}
				if !strings.Contains(err.Error(), tc.errIn) {
					t.Errorf("error %q, want it to contain %q", err, tc.errIn)
				}
			default:
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if !bytes.Equal(got, tc.want) {
					t.Errorf("Decode = %.60q, want %.60q", got, tc.want)
				}
			}
		})
	}
}

// TestDecodeTruncated: a stream cut anywhere is an error, never the part that was read.
func TestDecodeTruncated(t *testing.T) {
	plain := make([]byte, 64<<10)
	for i := range plain {
		plain[i] = byte(i * 7 / 5) // some structure, not all zeros
	}
	stacks := [][]string{{"gzip"}, {"deflate"}, {"br"}, {"gzip", "br"}, {"br", "gzip"}, {"deflate", "gzip"}}
	for _, codings := range stacks {
		t.Run(strings.Join(codings, ","), func(t *testing.T) {
			enc := encode(t, plain, codings...)
			if got, err := Decode(enc, codings, 1<<20); err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("whole stream: %d bytes, %v", len(got), err)
			}
			// Every cut of a short stream, and a spread of cuts plus the last few of a long one.
			cuts := map[int]bool{}
			for n := range min(len(enc), 64) {
				cuts[n] = true
			}
			for n := 0; n < len(enc); n += max(1, len(enc)/97) {
				cuts[n] = true
			}
			for n := max(0, len(enc)-16); n < len(enc); n++ {
				cuts[n] = true
			}
			for n := range cuts {
				got, err := Decode(enc[:n], codings, 1<<20)
				if err == nil {
					t.Fatalf("cut to %d of %d bytes: success with %d bytes", n, len(enc), len(got))
				}
				if got != nil || errors.Is(err, ErrTooLarge) {
					t.Fatalf("cut to %d of %d bytes: %d bytes, %v", n, len(enc), len(got), err)
				}
			}
		})
	}
	// The inner stream cut, the outer one whole.
	inner := encode(t, plain, "gzip")
	body := encode(t, inner[:len(inner)-1], "br")
	if got, err := Decode(body, []string{"gzip", "br"}, 1<<20); err == nil {
		t.Fatalf("inner gzip cut by a byte under a whole br: success with %d bytes", len(got))
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// bomb is n zero bytes under coding, encoded in a stream without holding the n bytes.
func bomb(tb testing.TB, n int64, coding string) []byte {
	tb.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	case "deflate":
		w, _ = zlib.NewWriterLevel(&buf, zlib.BestCompression)
	case "br":
		// The largest window a decoder without the large-window extension accepts.
		w = brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: 1, LGWin: 24})
	default:
		tb.Fatalf("bomb: no encoder for %q", coding)
	}
	if _, err := io.Copy(w, io.LimitReader(zeros{}, n)); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// brWindow is the largest ring buffer a brotli stream can make the decoder allocate: the 16 MiB
// window (lgwin 24), which it sizes from the stream header, not from what the stream decodes to.
// The decoder may grow its ring buffer up to it, so a br stage allocates up to about twice this
// whatever the limit.
const brWindow = 16 << 20

// TestDecodeBomb: a small body that decodes far past the limit is ErrTooLarge, and decoding it
// allocates a small multiple of the limit (plus brotli's window), not what the body would decode
// to. In the stacked cases the bomb is the inner coding, and the outer stage decodes to less than
// the limit, so that the inner stage is the one that stops.
func TestDecodeBomb(t *testing.T) {
	const (
		limit  = 256 << 10
		expand = 64 << 20 // what each bomb decodes to: 256 times the limit
		slack  = 1 << 20
	)
	bombs := map[string][]byte{}
	for _, c := range []string{"gzip", "deflate", "br"} {
		bombs[c] = bomb(t, expand, c)
	}
	tests := []struct {
		name    string
		codings []string // as applied: the first is the bomb
		alloc   uint64   // the most Decode may allocate
	}{
		{name: "gzip", codings: []string{"gzip"}, alloc: 8*limit + slack},
		{name: "deflate", codings: []string{"deflate"}, alloc: 8*limit + slack},
		{name: "br", codings: []string{"br"}, alloc: 8*limit + 2*brWindow + slack},
		{name: "gzip under gzip", codings: []string{"gzip", "gzip"}, alloc: 16*limit + slack},
		{name: "gzip under br", codings: []string{"gzip", "br"}, alloc: 16*limit + 2*brWindow + slack},
		{name: "br under gzip", codings: []string{"br", "gzip"}, alloc: 16*limit + 2*brWindow + slack},
		{name: "deflate under br under gzip", codings: []string{"deflate", "br", "gzip"}, alloc: 24*limit + 2*brWindow + slack},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inner := bombs[tc.codings[0]]
			if len(tc.codings) > 1 && len(inner) > limit {
				t.Fatalf("the %d-byte inner bomb is over the limit: the outer stage would stop first", len(inner))
			}
			body := encode(t, inner, tc.codings[1:]...)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			got, err := Decode(body, tc.codings, limit)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrTooLarge) || got != nil {
				t.Fatalf("Decode of a %d-byte bomb = %d bytes, %v; want ErrTooLarge", len(body), len(got), err)
			}
			a := after.TotalAlloc - before.TotalAlloc
			if a > tc.alloc {
				t.Errorf("Decode of a %d-byte bomb allocated %d bytes, want at most %d", len(body), a, tc.alloc)
			}
			t.Logf("%d-byte bomb: %d bytes allocated", len(body), a)
		})
	}
}

func BenchmarkDecodeBomb(b *testing.B) {
	const limit = 1 << 20
	for _, coding := range []string{"gzip", "deflate", "br"} {
		body := bomb(b, 1<<30, coding)
		b.Run(fmt.Sprintf("%s/%dKiB-to-1GiB", coding, len(body)>>10), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(body, []string{coding}, limit); !errors.Is(err, ErrTooLarge) {
					b.Fatal(err)
				}
			}
		})
	}
}
