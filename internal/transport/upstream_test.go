package transport

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestTrimIdleKeepsTheLastUsed: a quiet gate closes each origin's idle upstream connections but
// the last ones put back, and the pool's count follows.
func TestTrimIdleKeepsTheLastUsed(t *testing.T) {
	c := NewUpstream(nil, nil)
	var far []net.Conn // the origin's ends: a closed connection reads EOF there
	for _, key := range []string{"https://a:443", "https://b:443"} {
		n := 6
		if key == "https://b:443" {
			n = 2
		}
		for range n {
			near, f := net.Pipe()
			far = append(far, f)
			c.idle[key] = append(c.idle[key], &upConn{key: key, conn: near})
			c.total++
		}
	}
	kept := append([]*upConn(nil), c.idle["https://a:443"][2:]...)
	c.TrimIdle(4)
	if got := c.idle["https://a:443"]; len(got) != 4 || got[0] != kept[0] || got[3] != kept[3] {
		t.Fatalf("a's idle connections after the trim: %d, want the 4 put back last", len(got))
	}
	if len(c.idle["https://b:443"]) != 2 || c.total != 6 {
		t.Fatalf("b kept %d (want 2), total %d (want 6)", len(c.idle["https://b:443"]), c.total)
	}
	for i, f := range far {
		f.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) // a closed one reads EOF at once
		_, err := f.Read(make([]byte, 1))
		closed := err == io.EOF
		if want := i < 2; closed != want {
			t.Errorf("connection %d: closed %v, want %v (%v)", i, closed, want, err)
		}
	}
}
