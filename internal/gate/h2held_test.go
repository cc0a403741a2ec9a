package gate

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// The held bytes of HTTP/2 streams: an open stream's decoded header is charged to its
// container while the stream is open (h2.go, streamCharge), and a stream the held bytes cannot
// take is refused at once with E_BUSY.

// h2BigHeader is the fields of a PUT to path whose header list decodes to about 59 KiB: 15
// Cookie fields of 3,900 bytes, which the client's HPACK encoder puts in its table once and
// then sends as one-byte indexes (and which x/net joins into one 58 KiB string). It declares a
// body of one byte. size is the list's decoded size as HTTP/2 counts it.
func (h *h2Raw) bigHeader(path string) (fields []string, size int) {
	fields = h.get("PUT", path, "content-length", "1")
	pad := strings.Repeat("c", 3900)
	for range 15 {
		fields = append(fields, "cookie", pad)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		size += int(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}.Size())
	}
	return fields, size
}

// stalledGate is a TLS gate whose streams wait for their bodies as long as a test needs.
func stalledGate(t *testing.T) (*tlsGate, *countingOrigin) {
	origin := &countingOrigin{}
	tg := startTLSGateWith(t, origin, func(c *Config) { c.BodyStall, c.BodyGrace = time.Minute, time.Minute })
	return tg, origin
}

// TestH2HeaderHeldWhileStreamOpen: a stream whose header list decodes to 59 KiB from a few
// bytes on the wire, waiting for a body, holds at least that much of the held bytes, and gives
// it all back however it ends: reset by the client, its connection closed, or answered.
func TestH2HeaderHeldWhileStreamOpen(t *testing.T) {
	for _, end := range []string{"reset", "closed", "answered"} {
		t.Run(end, func(t *testing.T) {
			tg, origin := stalledGate(t)
			h := tg.rawH2(t)
			// The first stream puts the cookie in the HPACK table; the second sends it as
			// indexes, 15 bytes for 58 KiB.
			for _, id := range []uint32{1, 3} {
				fields, size := h.bigHeader(fmt.Sprintf("/held/%d", id))
				h.headers(id, false, fields...)
				testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("stream %d's header in the held bytes", id), func() bool {
					return tg.gate.HeldBytes() >= int64(size)*int64(id/2+1)
				})
			}
			t.Logf("two open streams hold %d bytes", tg.gate.HeldBytes())
			switch end {
			case "reset":
				h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
				h.fr.WriteRSTStream(3, http2.ErrCodeCancel)
			case "closed":
				h.tc.Close()
			case "answered":
				h.fr.WriteData(1, true, []byte("x"))
				h.fr.WriteData(3, true, []byte("x"))
				for _, id := range []uint32{1, 3} {
					if o := h.wait(id); o.status != 200 {
						t.Fatalf("stream %d: %+v", id, o)
					}
				}
				if origin.count() != 2 {
					t.Fatalf("the origin saw %d requests, want 2", origin.count())
				}
			}
			testkit.WaitFor(t, 5*time.Second, "the held bytes given back", func() bool { return tg.gate.HeldBytes() == 0 })
		})
	}
}

// TestH2StreamPastHeldIsBusy: with room for one large header in the held bytes, a second
// stream is refused at once (503 E_BUSY, Retry-After, the rule it passed) with its record, on
// its own: the first stream's charge stays until it ends, the connection goes on, and nothing
// reaches the origin.
func TestH2StreamPastHeldIsBusy(t *testing.T) {
	for _, c := range []struct {
		name                string
		perContainer, inAll int64
		rule                string
	}{
		{"per container", 160 << 10, 1 << 20, "held_per_container"},
		{"in all", 1 << 20, 160 << 10, "held_limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg, origin := stalledGate(t)
			p := *tg.gate.Policy()
			p.Settings.HeldPerContainer, p.Settings.HeldLimit = c.perContainer, c.inAll
			tg.gate.SetPolicy(&p)
			h := tg.rawH2(t)
			fields, size := h.bigHeader("/first")
			h.headers(1, false, fields...)
			testkit.WaitFor(t, 5*time.Second, "the first stream's header in the held bytes", func() bool {
				return tg.gate.HeldBytes() >= int64(size)
			})
			first := tg.gate.HeldBytes()
			fields, _ = h.bigHeader("/second")
			h.headers(3, false, fields...)
			o := h.wait(3)
			if o.status != http.StatusServiceUnavailable || o.lockCode != "E_BUSY" || o.retryAfter != "5" ||
				!strings.Contains(o.body, "Rule:    "+c.rule) || !strings.Contains(o.body, "open HTTP/2 streams") {
				t.Fatalf("the second stream: %+v", o)
			}
			rec := waitRecord(t, tg.audit, "the refused stream's record", func(m map[string]any) bool {
				return m["code"] == "E_BUSY" && m["stream"] == float64(3)
			})
			if rec["rule"] != c.rule || rec["event"] != "tunnel-request" || rec["container"] != "local" || rec["method"] != "PUT" ||
				rec["url"] != fmt.Sprintf("https://origin.test:%d/second", tg.port) || rec["status"] != float64(503) || rec["verdict"] != "DENY" {
				t.Fatalf("the refused stream's record: %v", rec)
			}
			if held := tg.gate.HeldBytes(); held != first {
				t.Fatalf("held bytes %d after the refusal, want the first stream's %d", held, first)
			}
			// The connection goes on; once the first stream ends, its room is free again.
			h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			testkit.WaitFor(t, 5*time.Second, "the first stream's charge given back", func() bool { return tg.gate.HeldBytes() == 0 })
			fields, _ = h.bigHeader("/third")
			h.headers(5, false, fields...)
			h.fr.WriteData(5, true, []byte("x"))
			if o := h.wait(5); o.status != 200 {
				t.Fatalf("a stream after the refusal: %+v", o)
			}
			if origin.count() != 1 {
				t.Fatalf("the origin saw %d requests, want the third stream's", origin.count())
			}
		})
	}
}

// TestH2PacingWaitsForHandlers: on a paced connection, the header block of a new stream waits
// while a stream opened before it has no handler yet, or while h2BusyAtOnce streams are being
// refused E_BUSY; a claim, the server's own refusal, the client's reset, a refusal written, or
// the connection's end lets it go.
func TestH2PacingWaitsForHandlers(t *testing.T) {
	waiting := func(st *h2Streams) bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.wake != nil
	}
	// atOnce reports whether awaitHandlers returns without waiting for anything.
	atOnce := func(st *h2Streams) bool {
		done := make(chan struct{})
		go func() { st.AwaitHandlers(); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(h2PaceWait / 2): // it returns at once, or waits up to h2PaceWait
			return false
		}
	}
	// paced runs awaitHandlers on st and checks that it waits until release lets it go.
	paced := func(t *testing.T, st *h2Streams, release func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { st.AwaitHandlers(); close(done) }()
		testkit.WaitFor(t, 5*time.Second, "the next header block waiting", func() bool { return waiting(st) })
		select {
		case <-done:
			t.Fatal("the next header block went on before the stream before it had a handler")
		default:
		}
		release()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the next header block still waits")
		}
	}
	for _, c := range []struct {
		name    string
		release func(st *h2Streams)
	}{
		{"claimed", func(st *h2Streams) { st.claim(1, false) }},
		{"refused by the server", func(st *h2Streams) { st.mu.Lock(); st.take(1); st.mu.Unlock() }},
		{"reset by the client", func(st *h2Streams) { st.Cancelled(1) }},
		{"GOAWAY", func(st *h2Streams) { st.Unpace() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &h2Streams{open: map[uint32]bool{}, pace: true}
			st.Opened(1)
			paced(t, st, func() { c.release(st) })
		})
	}
	t.Run("busy", func(t *testing.T) {
		st := &h2Streams{open: map[uint32]bool{}, pace: true}
		for id := uint32(1); id < 2*h2BusyAtOnce; id += 2 {
			st.Opened(id)
			st.claim(id, true)
			if id < 2*h2BusyAtOnce-1 && !atOnce(st) {
				t.Fatalf("the next header block waits with %d streams being refused", id/2+1)
			}
		}
		paced(t, st, st.busyDone)
	})
	t.Run("unpaced", func(t *testing.T) {
		st := &h2Streams{open: map[uint32]bool{}}
		st.Opened(1)
		if !atOnce(st) { // a connection serveH2 did not pace (the fuzz targets') never waits
			t.Fatal("an unpaced connection waits")
		}
	})
}
