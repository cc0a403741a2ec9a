package console

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/mtls"
)

// maxGatesSeen bounds the gates the console remembers; past it the one that fetched least
// recently is forgotten, as is one that has not fetched for gateForget (a pod replaced).
const (
	maxGatesSeen = 4096
	gateForget   = 10 * time.Minute
)

// FleetHandler serves the gates of a fleet over mutual TLS (a listener of mtls.Server, with
// mtls.ConnContext): GET /policy to the identities gates admits, GET /status to those and to the
// identities readers admits (a facade, the doctor). Any other identity gets 403 and a record in
// the console's audit. Each gate identity's last fetch is kept for GET /status (Gates).
func (c *Console) FleetHandler(gates, readers mtls.Allow) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /policy", c.servePolicy)
	mux.HandleFunc("GET /status", c.serveStatus)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := mtls.PeerOf(r)
		allowed := ok && (gates.Admits(id) || r.URL.Path == "/status" && readers.Admits(id))
		if !allowed {
			c.log.Warn("console: identity refused", "id", id.String(), "remote", r.RemoteAddr, "path", r.URL.Path)
			c.record(&audit.Record{Event: "peer-refused", Status: http.StatusForbidden,
				Detail: fmt.Sprintf("identity %s from %s refused on %s %s", id, r.RemoteAddr, r.Method, r.URL.Path)})
			http.Error(w, "forbidden: this identity may not "+r.Method+" "+r.URL.Path, http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// instanceOf is the gate instance a request names (consoleapi.HeaderGate): "" when absent or
// not 1 to 64 letters, digits, '.', '_', '-' and ':'.
func instanceOf(r *http.Request) string {
	v := r.Header.Get(consoleapi.HeaderGate)
	if v == "" || len(v) > 64 {
		return ""
	}
	for _, c := range []byte(v) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return ""
		}
	}
	return v
}

// sawGate records that the gate identity id, instance instance, fetched the policy and holds s
// (its tag) after it.
func (c *Console) sawGate(id mtls.ID, instance, remote string, s *Served) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gates == nil {
		c.gates = map[string]*consoleapi.GateSeen{}
	}
	key := id.String() + "@" + instance
	g := c.gates[key]
	if g == nil {
		if len(c.gates) >= maxGatesSeen {
			var oldest string
			for k, o := range c.gates {
				if oldest == "" || o.At.Before(c.gates[oldest].At) {
					oldest = k
				}
			}
			delete(c.gates, oldest)
		}
		g = &consoleapi.GateSeen{ID: id.String(), Instance: instance, First: now}
		c.gates[key] = g
	}
	if g.Version != s.Version {
		g.Since = now
	}
	g.Version, g.Tag, g.At, g.Remote = s.Version, s.Tag, now, remote
	g.Fetches++
}

// gatesSeenLocked lists the gates seen within gateForget, the first seen first, and forgets
// the others. The caller holds mu.
func (c *Console) gatesSeenLocked() []consoleapi.GateSeen {
	now := c.now()
	out := make([]consoleapi.GateSeen, 0, len(c.gates))
	for k, g := range c.gates {
		if now.Sub(g.At) > gateForget {
			delete(c.gates, k)
			continue
		}
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b consoleapi.GateSeen) int {
		return cmp.Or(a.First.Compare(b.First), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Instance, b.Instance))
	})
	return out
}

// SetTLS records the addresses the console serves gates (and the hub serves gates and facades)
// on over mutual TLS, for GET /status.
func (c *Console) SetTLS(policy, hub string) {
	c.mu.Lock()
	c.tlsAddr, c.hubTLS = policy, hub
	c.mu.Unlock()
}
