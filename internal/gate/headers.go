package gate

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1, plus the de facto ones): they describe
// one connection and never cross the gate.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// stripHop removes the hop-by-hop headers and every header that Connection names. It returns the
// Upgrade value; a WebSocket upgrade keeps "Connection: Upgrade" and its Upgrade header.
func stripHop(h http.Header) (upgrade string) {
	upgrade = h.Get("Upgrade")
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	if upgrade != "" && isWebSocket(upgrade) {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", upgrade)
	}
	return upgrade
}

func isWebSocket(upgrade string) bool {
	return strings.EqualFold(strings.TrimSpace(upgrade), "websocket")
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
