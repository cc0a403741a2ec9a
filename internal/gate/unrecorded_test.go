package gate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/refusal"
)

// flakyAuditor is a real audit writer whose writes fail while fail is set, and which stays
// healthy meanwhile: the decision was taken while the audit could be written, and so was the
// request's intent record as it went out, the record of the request's answer cannot be (a disk
// that filled in between). With failIntents the intent records fail too.
type flakyAuditor struct {
	*audit.Writer
	fail        atomic.Bool
	failIntents atomic.Bool
}

var errTestFull = errors.New("audit: write test.jsonl: no space left on device")

func (a *flakyAuditor) Write(ctx context.Context, r *audit.Record) error {
	if a.fail.Load() {
		return errTestFull
	}
	return a.Writer.Write(ctx, r)
}

func (a *flakyAuditor) Append(ctx context.Context, r *audit.Record) error {
	if r.Event == audit.EventIntent {
		if a.failIntents.Load() {
			return errTestFull
		}
		return a.Writer.Append(ctx, r)
	}
	if a.fail.Load() {
		return errTestFull
	}
	return a.Writer.Append(ctx, r)
}

func flaky(fa **flakyAuditor) func(*Config) {
	return func(c *Config) {
		*fa = &flakyAuditor{Writer: c.Audit.(*audit.Writer)}
		c.Audit = *fa
	}
}

// streamingOrigin answers /stream/ with 64 KiB sent in pieces without a length (chunked to an
// HTTP/1.1 client, ended by the close for HTTP/1.0), /ws with a WebSocket switch, anything
// else with a short body of known length.
func streamingOrigin(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/stream/"):
		for range 16 {
			w.Write([]byte(strings.Repeat("s", 4<<10)))
			w.(http.Flusher).Flush()
		}
	case r.URL.Path == "/ws":
		wsEchoOrigin(w, r)
	default:
		w.Header().Set("Content-Length", "9")
		io.WriteString(w, "whole-one")
	}
}

// complete reports whether the client read a whole answer.
func complete(resp *http.Response, err error) (bool, string) {
	if err != nil {
		return false, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return err == nil, string(b)
}

// noRecordOf fails when a record names id.
func noRecordOf(t *testing.T, recs []map[string]any, ids ...string) {
	t.Helper()
	for _, r := range recs {
		for _, id := range ids {
			if id != "" && r["id"] == id {
				t.Errorf("a record names %s although its write failed: %v", id, r)
			}
		}
	}
}

// TestUnrecordedAnswerIsCut: when a forwarded answer's record cannot be written, the answer never
// completes: its last bytes are held back and the connection is reset (a body short of its
// Content-Length, no final chunk, an HTTP/1.0 body that ends in an error, not an end), plain
// and inside a decrypted tunnel; an HTTP/2 stream is reset. The gate counts each in its status.
func TestUnrecordedAnswerIsCut(t *testing.T) {
	var fa *flakyAuditor
	tg := startGateWith(t, http.HandlerFunc(streamingOrigin), flaky(&fa))
	fa.fail.Store(true)
	for _, path := range []string{"/length/1", "/stream/1"} {
		t.Run("plain "+path, func(t *testing.T) {
			before := tg.origin.count()
			resp, err := tg.client().Get(tg.url(path))
			if ok, body := complete(resp, err); ok {
				t.Fatalf("the client read a whole answer (%d bytes) whose record was never written", len(body))
			}
			if tg.origin.count() == before {
				t.Fatal("the origin was not reached: the test does not test the cut")
			}
		})
	}
	t.Run("plain HTTP/1.0 ended by the close", func(t *testing.T) {
		c, err := net.Dial("tcp", tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", tg.url("/stream/10"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the close-delimited answer ended with %v after %d bytes, want a reset (an end would make it whole)", err, len(got))
		}
	})

	var ft *flakyAuditor
	tlg := startTLSGateWith(t, http.HandlerFunc(streamingOrigin), flaky(&ft))
	ft.fail.Store(true)
	for _, path := range []string{"/length/2", "/stream/2"} {
		t.Run("decrypted HTTP/1.1 "+path, func(t *testing.T) {
			tc, br := openTunnel(t, tlg)
			defer tc.Close()
			fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", path, tlg.port)
			tc.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if ok, body := complete(resp, err); ok {
				t.Fatalf("the client read a whole answer (%d bytes) whose record was never written", len(body))
			}
			// The tunnel is closed under it, with a reset: not a TLS close_notify after a
			// short body.
			if _, err := br.ReadByte(); err == nil || errors.Is(err, io.EOF) {
				t.Errorf("after the cut the tunnel read %v, want a reset", err)
			}
		})
		t.Run("decrypted HTTP/2 "+path, func(t *testing.T) {
			resp, err := tlg.h2Client().Get(fmt.Sprintf("https://origin.test:%d%s", tlg.port, path))
			if ok, body := complete(resp, err); ok {
				t.Fatalf("the client read a whole answer (%d bytes) whose record was never written", len(body))
			}
			if err == nil && resp.ProtoMajor != 2 {
				t.Fatalf("the answer came over HTTP/%d", resp.ProtoMajor)
			}
		})
	}
	t.Run("a cleartext tunnel", func(t *testing.T) {
		plain := httptest.NewServer(http.HandlerFunc(streamingOrigin))
		defer plain.Close()
		pport := plain.Listener.Addr().(*net.TCPAddr).Port
		p, err := policy.Load("clear.toml", []byte(fmt.Sprintf("version = 1\ntrusted = [\"origin.test\"]\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[sources]\nlocal = [\"127.0.0.0/8\"]\n", pport)))
		if err != nil {
			t.Fatal(err)
		}
		old := tlg.gate.Policy()
		tlg.gate.SetPolicy(p)
		defer tlg.gate.SetPolicy(old)
		c, err := net.Dial("tcp", tlg.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		auth := fmt.Sprintf("origin.test:%d", pport)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", auth, auth)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		for _, path := range []string{"/length/3", "/stream/3"} {
			fmt.Fprintf(c, "GET http://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n", auth, path, auth)
			resp, err := http.ReadResponse(br, nil)
			if ok, body := complete(resp, err); ok {
				t.Fatalf("%s: the client read a whole answer (%d bytes) whose record was never written", path, len(body))
			}
			break // the connection is cut: one request is all it carries
		}
	})

	for _, g := range []*Gate{tg.g, tlg.gate} {
		rec := httptest.NewRecorder()
		g.StatusHandler(StatusInfo{}).ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
		var st Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.UnrecordedAnswers == 0 {
			t.Errorf("status = %s, want unrecorded_answers counted", rec.Body.String())
		}
	}
	// Once the audit can be written again, answers complete.
	fa.fail.Store(false)
	resp, err := tg.client().Get(tg.url("/length/after"))
	if ok, body := complete(resp, err); !ok || body != "whole-one" {
		t.Fatalf("after the audit recovered: %v %q", err, body)
	}
}

// TestUnrecordedAnswerOfTheGateHasNoID: an answer the gate makes itself (a refusal, a refusal in
// JSON, its own name, a failure to reach the target, a WebSocket switch it would pass) whose
// record cannot be written is 503 E_NO_AUDIT without a request id: the client is never shown an
// id no record holds.
func TestUnrecordedAnswerOfTheGateHasNoID(t *testing.T) {
	var fa *flakyAuditor
	tg := startGateWith(t, http.HandlerFunc(streamingOrigin), flaky(&fa))
	fa.fail.Store(true)
	o := fmt.Sprintf("origin.test:%d", tg.port)
	// gone.test on a port nothing listens on, in a policy of its own (502).
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := l.Addr().(*net.TCPAddr).Port
	l.Close()
	gonePolicy, err := policy.Load("p.toml", []byte(fmt.Sprintf("version = 1\ntrusted = [\"gone.test\"]\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[floor.hosts]\n\"gone.test\" = \"127.0.0.1\"\n[sources]\nlocal = [\"127.0.0.0/8\"]\n", gone)))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		url    string
		accept string
		pol    *policy.Policy
	}{
		{"a refusal", tg.url("/secret/x"), "", nil},
		{"a refusal in JSON", tg.url("/secret/y"), "application/json", nil},
		{"the gate's own name", "http://lockhttp.internal/", "", nil},
		{"an unreachable target", fmt.Sprintf("http://gone.test:%d/", gone), "", gonePolicy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.pol != nil {
				old := tg.g.Policy()
				tg.g.SetPolicy(c.pol)
				defer tg.g.SetPolicy(old)
			}
			req, _ := http.NewRequest("GET", c.url, nil)
			if c.accept != "" {
				req.Header.Set("Accept", c.accept)
			}
			resp, err := tg.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(resp)
			if resp.StatusCode != 503 || resp.Header.Get(HeaderCode) != "E_NO_AUDIT" {
				t.Fatalf("got %d %s, want 503 E_NO_AUDIT:\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), body)
			}
			if id, ok := resp.Header[HeaderRequest]; ok {
				t.Errorf("the answer shows request id %q, which no record holds", id)
			}
			if !strings.Contains(body, refusal.UnrecordedID) {
				t.Errorf("the body does not say the request has no record:\n%s", body)
			}
		})
	}
	t.Run("a WebSocket switch", func(t *testing.T) {
		before := tg.origin.count()
		out := tg.raw(t, "GET http://"+o+"/ws HTTP/1.1\r\nHost: "+o+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 503") || !strings.Contains(out, "E_NO_AUDIT") || strings.Contains(out, HeaderRequest) || strings.Contains(out, " 101 ") {
			t.Fatalf("got:\n%s", out)
		}
		if tg.origin.count() == before {
			t.Fatal("the origin was not reached: the test does not test the switch")
		}
	})
	fa.fail.Store(false)
	noRecordOf(t, tg.records(t)) // nothing was written while the writes failed
	if n := len(tg.records(t)); n != 0 {
		t.Errorf("%d records written while every write failed", n)
	}
	// The same refusal once the audit works shows its id, which its record holds.
	resp, err := tg.client().Get(tg.url("/secret/z"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(resp)
	id := resp.Header.Get(HeaderRequest)
	found := false
	for _, r := range tg.records(t) {
		found = found || r["id"] == id
	}
	if resp.Header.Get(HeaderCode) != "E_RULE" || id == "" || !found {
		t.Fatalf("after the audit recovered: %s id %q recorded %v", resp.Header.Get(HeaderCode), id, found)
	}
}
