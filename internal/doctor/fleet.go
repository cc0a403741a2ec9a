package doctor

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
)

// Each gate of a fleet fetches the policy every 2 s by default: a gate whose last fetch is older
// than fleetStale is stopped, cut off or refused, and one still holding an older policy than
// fleetLag after the console began serving the new one did not take it.
const (
	fleetStale = 30 * time.Second
	fleetLag   = 30 * time.Second
)

// GatherFleet examines a fleet's console at url (https://HOST:PORT, its -tls-listen) over mutual
// TLS with cfg (a facade's identity, which the console serves its status): the policy it
// serves and the version each gate identity last fetched.
func GatherFleet(ctx context.Context, url string, cfg *tls.Config) *Facts {
	f := &Facts{Mode: "fleet", Now: time.Now()}
	c := &ConsoleFacts{Socket: url}
	f.Console = c
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: cfg, TLSHandshakeTimeout: 10 * time.Second}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/status", nil)
	if err != nil {
		c.Err = err.Error()
		return f
	}
	resp, err := cl.Do(req)
	if err != nil {
		c.Err = err.Error()
		return f
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		c.Err = fmt.Sprintf("answered %s: %s", resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
		return f
	}
	var st console.Status
	if err := json.Unmarshal(body, &st); err != nil {
		c.Err = "a status that does not read: " + err.Error()
		return f
	}
	c.Status = &st
	if st.Version != "" {
		c.Policy = fmt.Sprintf("%s, version %s", orNone(st.Name), short(st.Version))
	}
	return f
}

// assessFleet says, for each gate (identity and instance) the console saw fetch the policy over
// mutual TLS, whether it decides with the policy the console serves.
func assessFleet(r *Report, f *Facts) {
	c := f.Console
	if c == nil || c.Status == nil {
		return
	}
	st := c.Status
	if f.Mode == "fleet" && len(st.Gates) == 0 {
		r.add(Warn, "fleet", "no gate has fetched the policy over mutual TLS since the console started; fix: start the gates with -console https://%s and their certificates, and read the console's audit for refused ones (peer-refused)", orNone(st.TLS))
		return
	}
	for _, g := range st.Gates {
		name := strings.TrimPrefix(g.ID, "spiffe://lockhttp/")
		if g.Instance != "" {
			name += "@" + g.Instance
		}
		ago := f.Now.Sub(g.At).Round(time.Second)
		switch {
		case f.Now.Sub(g.At) > fleetStale:
			r.add(Warn, "fleet", "%s has not fetched the policy for %s (last from %s, holding %s): it is stopped, cut off, or refused (an expired or revoked certificate: the console's audit says peer-refused); fix: look at that gate's status and log; a gate taken out of the fleet is listed until the console restarts",
				name, ago, g.Remote, short(g.Version))
		case g.Version != st.Version && f.Now.Sub(st.LoadedAt) > fleetLag:
			r.add(Error, "fleet", "%s decides with policy %s while the console serves %s since %s; fix: look at that gate's log (a policy it cannot load is refused there)",
				name, short(g.Version), short(st.Version), st.LoadedAt.UTC().Format(time.DateTime))
		case g.Version != st.Version:
			r.add(OK, "fleet", "%s has not fetched the console's new policy %s yet (served %s ago; it polls every few seconds)", name, short(st.Version), f.Now.Sub(st.LoadedAt).Round(time.Second))
		default:
			r.add(OK, "fleet", "%s decides with the console's policy %s (since %s; its last fetch %s ago, from %s)",
				name, short(g.Version), g.Since.UTC().Format(time.DateTime), ago, g.Remote)
		}
	}
}
