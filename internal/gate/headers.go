package gate

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1, plus the de facto ones) of a response:
// they describe one connection and never cross the gate. judge.See strips those of requests.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// stripHopResponse removes hop-by-hop headers from an origin's response, keeping those of a
// switch to WebSocket.
func stripHopResponse(resp *http.Response) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		for _, k := range []string{"Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding"} {
			delete(resp.Header, k)
		}
		return
	}
	for _, v := range resp.Header["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				resp.Header.Del(tok)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(resp.Header, k)
	}
}
