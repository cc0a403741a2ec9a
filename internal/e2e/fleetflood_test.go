package e2e

import (
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestFleetListenerFloodBounded: a peer without a certificate that opens a thousand connections
// to the console's listeners of mutual TLS and never completes a handshake holds at most 16 of
// them on each (connlimit's per-peer cap), each until the handshake's deadline (5 s); a gate of
// the fleet still fetches the policy meanwhile. The console's descriptors and memory say so.
func TestFleetListenerFloodBounded(t *testing.T) {
	o := httptest.NewServer(&originRecorder{})
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startTLSFleet(t, fmt.Sprintf(askPolicy, port, "30s"))
	pid := r.console.cmd.Process.Pid
	fds := func() int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		return len(ents)
	}
	before, rss0 := fds(), procRSS(t, pid)
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for _, addr := range []string{r.status.TLS, r.status.HubTLS} {
		for range 500 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			conns = append(conns, c)
		}
	}
	// The caps close the rest as they are accepted: wait until the console has seen them all.
	var held int
	testkit.WaitFor(t, 20*time.Second, "the console to hold at most 16 a listener", func() bool {
		held = fds() - before
		return held <= 2*16
	})
	rss := procRSS(t, pid)
	t.Logf("1,000 idle connections without a handshake: the console holds %d more descriptors, RSS %.1f → %.1f MiB", held, float64(rss0)/(1<<20), float64(rss)/(1<<20))

	// A gate still gets in.
	r.issue("gate", "a")
	g := r.gate("a")
	testkit.WaitFor(t, 20*time.Second, "the gate's policy during the flood", func() bool { return g.mustStatus().PolicyVersion != "" })

	// Past the handshake's deadline, none is left.
	testkit.WaitFor(t, 30*time.Second, "the flood's connections closed at the handshake's deadline", func() bool {
		return fds()-before <= 4 // the gate's own connections
	})
}
