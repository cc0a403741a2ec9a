package contentcoding

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// known are the codings Decode reads.
var known = []string{"gzip", "x-gzip", "deflate", "br"}

// fuzzLimit bounds the limit the fuzzer may choose, so that a bomb it finds stops early.
const fuzzLimit = 1 << 20

// FuzzDecode reads the input three ways, with the codings parsed from a Content-Encoding value:
//   - as a coded body: no panic; an error returns no bytes; a success is within the limit (or,
//     with no coding, the body itself); an unknown coding or too many codings never succeed; when
//     the outermost coding is br, a header naming a window over 4 MiB is ErrTooLarge and the
//     large-window extension another error, whatever the limit;
//   - as a plain body, coded with those codings (when Decode reads them all; each br stage with
//     a window of 1 KiB to 16 MiB, chosen by cut's high byte): Decode returns it exactly when
//     every stage's decoded size fits the limit and each br window is at most 4 MiB (whatever
//     the limit), and ErrTooLarge otherwise;
//   - that coded body cut short: always an error, never a part of the body.
func FuzzDecode(f *testing.F) {
	plains := [][]byte{
		nil,
		[]byte("a"),
		[]byte(`{"model":"claude","messages":[{"role":"user","content":"hi"}]}`),
		bytes.Repeat([]byte("abc"), 1000),
		make([]byte, 4096),
	}
	stacks := []string{"gzip", "x-gzip", "deflate", "br", "gzip, br", "br, gzip", "deflate, gzip, br", "identity", "GZIP , identity", ""}
	for _, p := range plains {
		for _, s := range stacks {
			f.Add(p, s, uint32(len(p)), uint16(len(p)/2))
			f.Add(encode(f, p, Codings(http.Header{"Content-Encoding": {s}})...), s, uint32(fuzzLimit), uint16(7))
		}
	}
	f.Add(bomb(f, 1<<20, "gzip", 0), "gzip", uint32(4096), uint16(0))
	f.Add(bomb(f, 1<<20, "br", 22), "br", uint32(4096), uint16(0))
	f.Add(bomb(f, 1<<20, "br", 24), "br", uint32(4096), uint16(0))
	f.Add(encode(f, bomb(f, 1<<20, "gzip", 0), "br"), "gzip, br", uint32(4096), uint16(0))
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"), "gzip", uint32(100), uint16(3)) // a gzip header, nothing after
	f.Add([]byte{0x78, 0x9c}, "deflate", uint32(100), uint16(1))                              // a zlib header, nothing after
	f.Add([]byte{0x06}, "br", uint32(100), uint16(0))                                         // an empty brotli stream
	f.Add([]byte{0x3b}, "br", uint32(0), uint16(0))                                           // an empty stream, window 4 MiB
	f.Add([]byte{0x3d}, "br", uint32(100), uint16(0))                                         // an empty stream, window 8 MiB
	f.Add([]byte{0x3f}, "br", uint32(100), uint16(0))                                         // an empty stream, window 16 MiB
	f.Add([]byte{0x11, 0xde}, "br", uint32(100), uint16(0))                                   // an empty stream, large window
	for lgwin := 21; lgwin <= 24; lgwin++ {
		f.Add([]byte("{}"), "br", uint32(100), uint16(lgwin-10)<<8) // coded with a window of 1<<lgwin
	}
	f.Add([]byte("plain"), "zstd", uint32(100), uint16(0))
	f.Add([]byte("plain"), "gzip, gzip, gzip, gzip, gzip", uint32(100), uint16(0))

	f.Fuzz(func(t *testing.T, body []byte, header string, limit uint32, cut uint16) {
		codings := Codings(http.Header{"Content-Encoding": {header}})
		lim := int64(limit % (fuzzLimit + 1))
		unknown := slices.ContainsFunc(codings, func(c string) bool { return !slices.Contains(known, c) })

		// The input as a coded body.
		out, err := Decode(body, codings, lim)
		switch {
		case err != nil:
			if out != nil {
				t.Fatalf("Decode(%q) failed (%v) yet returned %d bytes", codings, err, len(out))
			}
		case len(codings) == 0:
			if !bytes.Equal(out, body) {
				t.Fatalf("Decode with no coding changed the body")
			}
		case unknown:
			t.Fatalf("Decode(%q) read a coding it does not know", codings)
		case len(codings) > MaxCodings:
			t.Fatalf("Decode read %d codings, over MaxCodings", len(codings))
		case int64(len(out)) > lim:
			t.Fatalf("Decode(%q) returned %d bytes, over the limit %d", codings, len(out), lim)
		}
		if n := len(codings); n > 0 && n <= MaxCodings && codings[n-1] == "br" && len(body) > 0 {
			switch wbits, ok := brWindowBits(body[0]); {
			case !ok && (err == nil || errors.Is(err, ErrTooLarge)):
				t.Fatalf("Decode(%q) of a br stream with the large-window extension: %v; want an error, not ErrTooLarge", codings, err)
			case wbits > 22 && !errors.Is(err, ErrTooLarge):
				t.Fatalf("Decode(%q) of a br stream with a window of 1<<%d, limit %d: %v; want ErrTooLarge", codings, wbits, lim, err)
			}
		}
		if len(codings) == 0 || unknown || len(codings) > MaxCodings || len(body) > 16<<10 {
			return
		}

		// The input as a plain body, coded; every stage's output but the body's is limited.
		lgwin := 10 + int(cut>>8)%15
		wide := lgwin > 22 && slices.Contains(codings, "br") // refused whatever the limit
		coded := body
		stage := int64(len(body))
		for i, c := range codings {
			if c == "br" {
				coded = encodeBr(t, coded, lgwin)
			} else {
				coded = encodeOne(t, coded, c)
			}
			if i < len(codings)-1 {
				stage = max(stage, int64(len(coded)))
			}
		}
		out, err = Decode(coded, codings, lim)
		if lim >= stage && !wide {
			if err != nil {
				t.Fatalf("Decode(%q) of a body it coded, every stage within the limit %d: %v", codings, lim, err)
			}
			if !bytes.Equal(out, body) {
				t.Fatalf("Decode(%q) of a body it coded returned another body", codings)
			}
		} else if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Decode(%q) of a body it coded, a stage of %d bytes over the limit %d or a br window of 1<<%d over 4 MiB: %d bytes, %v", codings, stage, lim, lgwin, len(out), err)
		}

		// The coded body cut short.
		n := int(cut) % len(coded)
		out, err = Decode(coded[:n], codings, fuzzLimit)
		if err == nil || out != nil {
			t.Fatalf("Decode(%q) of a coded body cut to %d of %d bytes: %d bytes, %v", codings, n, len(coded), len(out), err)
		}
		if errors.Is(err, ErrTooLarge) && stage <= fuzzLimit && !wide {
			t.Fatalf("Decode(%q) of a cut body: ErrTooLarge, though no stage nor br window is over the limit", codings)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("Decode's error spans lines: %q", err)
		}
	})
}
