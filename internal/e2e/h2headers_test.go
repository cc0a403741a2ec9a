package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// h2Flood is one HTTP/2 connection inside a decrypted tunnel, spoken frame by frame: it opens
// streams whose header blocks its HPACK encoder indexes, and notes how the gate answers each.
type h2Flood struct {
	tc  *tls.Conn
	fr  *http2.Framer
	wmu sync.Mutex // guards fr's writes, enc and buf
	enc *hpack.Encoder
	buf bytes.Buffer

	mu      sync.Mutex         // guards answers
	answers map[uint32]h2Reply // the gate's answer to each stream
}

// h2Reply is the gate's answer to one stream of an h2Flood: its status and X-LockHTTP headers,
// or the code of the RST_STREAM that ended it unanswered.
type h2Reply struct {
	status     int
	code       string
	request    string
	retryAfter string
	reset      http2.ErrCode
}

// dialH2Flood opens a CONNECT to origin.test:port through the gate listening on gateAddr,
// completes TLS with cfg (h2 only), and sends the client preface and SETTINGS.
func dialH2Flood(gateAddr string, port int, cfg *tls.Config) (*h2Flood, error) {
	c, err := net.DialTimeout("tcp", gateAddr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT origin.test:%d HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 || br.Buffered() > 0 {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN inside the tunnel: %q", p)
	}
	f := &h2Flood{tc: tc, fr: http2.NewFramer(tc, tc), answers: map[uint32]h2Reply{}}
	f.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	f.enc = hpack.NewEncoder(&f.buf)
	if _, err := tc.Write([]byte(http2.ClientPreface)); err != nil {
		tc.Close()
		return nil, err
	}
	if err := f.fr.WriteSettings(); err != nil {
		tc.Close()
		return nil, err
	}
	go f.read()
	return f, nil
}

// read follows the gate's frames until the connection ends: it acknowledges SETTINGS and PING,
// gives back the connection's flow-control credit, and notes each stream's answer.
func (f *h2Flood) read() {
	for {
		fr, err := f.fr.ReadFrame()
		if err != nil {
			return
		}
		switch fr := fr.(type) {
		case *http2.SettingsFrame:
			if !fr.IsAck() {
				f.write(func() error { return f.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !fr.IsAck() {
				f.write(func() error { return f.fr.WritePing(true, fr.Data) })
			}
		case *http2.DataFrame:
			if n := uint32(len(fr.Data())); n > 0 {
				f.write(func() error { return f.fr.WriteWindowUpdate(0, n) })
			}
		case *http2.MetaHeadersFrame:
			st, _ := strconv.Atoi(fr.PseudoValue("status"))
			a := h2Reply{status: st}
			for _, hf := range fr.RegularFields() {
				switch hf.Name {
				case "x-lockhttp-code":
					a.code = hf.Value
				case "x-lockhttp-request":
					a.request = hf.Value
				case "retry-after":
					a.retryAfter = hf.Value
				}
			}
			f.mu.Lock()
			f.answers[fr.StreamID] = a
			f.mu.Unlock()
		case *http2.RSTStreamFrame:
			f.mu.Lock()
			if _, ok := f.answers[fr.StreamID]; !ok {
				f.answers[fr.StreamID] = h2Reply{reset: fr.ErrCode}
			}
			f.mu.Unlock()
		}
	}
}

func (f *h2Flood) write(w func() error) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return w()
}

// open opens stream id with the header block fields, HPACK-encoded with indexing, and no
// END_STREAM: the body it declares never comes.
func (f *h2Flood) open(id uint32, fields []hpack.HeaderField) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.buf.Reset()
	for _, hf := range fields {
		f.enc.WriteField(hf)
	}
	return f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: f.buf.Bytes(), EndHeaders: true})
}

// replies is the gate's answers so far.
func (f *h2Flood) replies() map[uint32]h2Reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[uint32]h2Reply, len(f.answers))
	for k, v := range f.answers {
		out[k] = v
	}
	return out
}

// amplifiedFields is the header block of a POST to the tunnel's host whose header list decodes
// to 59 KiB: 15 Cookie fields of 3,900 bytes, which the encoder puts in its HPACK table once
// and then sends as one-byte indexes (x/net joins them into one new 58 KiB string), and a body
// of one byte declared. Once the table holds its fields, a block is about 25 bytes on the wire.
func amplifiedFields(port int) []hpack.HeaderField {
	fs := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "https"},
		{Name: ":path", Value: "/upload/h2-headers"},
		{Name: ":authority", Value: fmt.Sprintf("origin.test:%d", port)},
		{Name: "content-length", Value: "1"},
	}
	pad := strings.Repeat("c", 3900)
	for range 15 {
		fs = append(fs, hpack.HeaderField{Name: "cookie", Value: pad})
	}
	return fs
}

// TestH2HeaderMemoryBounded is the attack of HPACK-amplified headers: 200 HTTP/2 connections
// inside decrypted tunnels from one container, each opening 100 streams whose header lists
// decode to 59 KiB from about 25 bytes on the wire, declaring bodies that never come. With the
// shipped bounds, the open streams' headers are charged to the container's held bytes (the
// gauge reaches held_per_container, 64 MiB, and no further); a stream past it is answered
// E_BUSY (503, Retry-After) with a record of its id; the gate's resident memory grows by less
// than the stated bound, twice (for the collector's headroom) held_per_container plus 512 KiB a
// connection (a header block the HTTP/2 server has decoded and no handler charged yet, up to 16
// streams waiting for their refusal's record, the tunnel itself); nothing reaches the origin;
// and once the connections close the held bytes are all given back. Before the streams were
// charged, the same attack grew the gate by 1.6 GiB.
func TestH2HeaderMemoryBounded(t *testing.T) {
	e := startH2(t, false, nil)
	gatePID := e.up.PIDs["gate"]
	if gatePID == 0 {
		t.Fatalf("up.json has no gate pid: %+v", e.up.PIDs)
	}
	const tunnels, streams = 200, 100
	fields := amplifiedFields(e.port)
	cfg := &tls.Config{ServerName: "origin.test", RootCAs: e.pool, NextProtos: []string{"h2"}}
	before := rssMiB(t, gatePID)
	floods := make([]*h2Flood, tunnels)
	errs := make(chan error, tunnels)
	var wg sync.WaitGroup
	for i := range floods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := dialH2Flood(e.up.Listen, e.port, cfg)
			if err != nil {
				errs <- err
				return
			}
			floods[i] = f
			for s := range streams {
				if err := f.open(uint32(2*s+1), fields); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range floods {
			f.tc.Close()
		}
	}()
	// Watch the gate until the container's held bytes are full and a thousand streams have been
	// refused past them (or every stream has its answer, or a minute has passed).
	const full = policy.DefaultHeldPerContainer - 2*(96<<10) // within two streams' charge of the bound
	peak, peakHeld := before, int64(0)
	busy := 0
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		peak = max(peak, rssMiB(t, gatePID))
		if held, ok := heldBytes(e.up); ok {
			peakHeld = max(peakHeld, held)
		}
		answered := 0
		busy = 0
		for _, f := range floods {
			for _, a := range f.replies() {
				answered++
				if a.code == "E_BUSY" {
					busy++
				}
			}
		}
		if peakHeld >= full && busy >= 1000 || answered == tunnels*streams {
			break
		}
		time.Sleep(100 * time.Millisecond) // the sampling interval of the resident memory
	}
	bound := 2 * (float64(policy.DefaultHeldPerContainer)/(1<<20) + tunnels*0.5)
	t.Logf("gate RSS %.1f MiB before, %.1f MiB at peak (+%.1f, bound %.0f); held bytes at peak %d (held_per_container %d); %d streams refused E_BUSY",
		before, peak, peak-before, bound, peakHeld, policy.DefaultHeldPerContainer, busy)
	if peakHeld < full || peakHeld > policy.DefaultHeldPerContainer {
		t.Errorf("held bytes at peak %d: want the open streams' headers charged up to held_per_container (%d) and no further", peakHeld, policy.DefaultHeldPerContainer)
	}
	if peak-before > bound {
		t.Errorf("the gate's RSS grew by %.1f MiB under the attack, past the bound of %.0f MiB", peak-before, bound)
	}
	// Every refusal is E_BUSY with Retry-After, and its id has a record (its own, or in a
	// summary of its second).
	var refused []h2Reply
	other := map[string]int{}
	for _, f := range floods {
		for _, a := range f.replies() {
			switch {
			case a.code == "E_BUSY":
				refused = append(refused, a)
			default:
				other[fmt.Sprintf("%d %s %v", a.status, a.code, a.reset)]++
			}
		}
	}
	if len(refused) == 0 {
		t.Fatalf("no stream was refused E_BUSY; answers %v", other)
	}
	for code := range other {
		// The streams the held bytes took wait for their bodies: refused by body_min_rate
		// once its grace has passed, or not answered yet.
		if !strings.HasPrefix(code, "408 E_BODY_TIMEOUT") {
			t.Errorf("answers besides E_BUSY: %v", other)
			break
		}
	}
	var ids map[string]int
	testkit.WaitFor(t, 10*time.Second, "a record of every refused stream", func() bool {
		ids = testkit.AuditIDs(t, e.up.AuditDir)
		for _, a := range refused {
			if ids[a.request] == 0 {
				return false
			}
		}
		return true
	})
	for _, a := range refused {
		if a.status != http.StatusServiceUnavailable || a.retryAfter != "5" || a.request == "" {
			t.Fatalf("a refused stream: %+v", a)
		}
	}
	if n := e.origin.count(); n != 0 {
		t.Errorf("the origin saw %d requests", n)
	}
	// Closing the connections ends their streams: every byte charged is given back.
	for _, f := range floods {
		f.tc.Close()
	}
	testkit.WaitFor(t, 30*time.Second, "the held bytes given back", func() bool {
		held, ok := heldBytes(e.up)
		return ok && held == 0
	})
}

// heldBytes is the gate's held bytes from its /status, or false when the gate did not answer
// in time (busy under the attack: the sample is skipped).
func heldBytes(up stack.Up) (int64, bool) {
	resp, err := unixsock.Client(up.GateSocket, 5*time.Second).Get("http://unix/status")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var st gate.Status
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return 0, false
	}
	return st.HeldBytes, true
}
