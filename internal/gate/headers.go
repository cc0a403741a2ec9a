package gate

import (
	"net/http"

	"github.com/lockhttp/lockhttp/internal/judge"
)

// stripHopResponse removes hop-by-hop headers from an origin's response (judge.RemoveHop, the
// same list as for requests), keeping those of a switch to WebSocket.
func stripHopResponse(resp *http.Response) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		for _, k := range []string{"Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding"} {
			delete(resp.Header, k)
		}
		return
	}
	judge.RemoveHop(resp.Header)
}
