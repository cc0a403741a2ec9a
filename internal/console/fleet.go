package console

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/mtls"
)

// maxGatesSeen bounds the gate identities the console remembers; past it the one that fetched
// least recently is forgotten.
const maxGatesSeen = 4096

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

// sawGate records that the gate identity id fetched the policy and holds s (its tag) after it.
func (c *Console) sawGate(id mtls.ID, remote string, s *Served) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gates == nil {
		c.gates = map[string]*consoleapi.GateSeen{}
	}
	g := c.gates[id.String()]
	if g == nil {
		if len(c.gates) >= maxGatesSeen {
			var oldest *consoleapi.GateSeen
			for _, o := range c.gates {
				if oldest == nil || o.At.Before(oldest.At) {
					oldest = o
				}
			}
			delete(c.gates, oldest.ID)
		}
		g = &consoleapi.GateSeen{ID: id.String(), First: now}
		c.gates[g.ID] = g
	}
	if g.Version != s.Version {
		g.Since = now
	}
	g.Version, g.Tag, g.At, g.Remote = s.Version, s.Tag, now, remote
	g.Fetches++
}

// gatesSeen lists the gate identities seen, the first seen first. The caller holds mu.
func (c *Console) gatesSeenLocked() []consoleapi.GateSeen {
	out := make([]consoleapi.GateSeen, 0, len(c.gates))
	for _, g := range c.gates {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b consoleapi.GateSeen) int {
		return cmp.Or(a.First.Compare(b.First), cmp.Compare(a.ID, b.ID))
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
