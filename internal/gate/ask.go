package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/fingerprint"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// Hub is the gate's view of the hub; *hubclient.Client is one.
type Hub interface {
	Connected() bool
	Ask(ctx context.Context, req hubapi.AskRequest) (hubapi.AskAnswer, error)
	Wait(ctx context.Context, id string) (hubapi.Ticket, error)
	Claim(ctx context.Context, id, fingerprint string) (*hubapi.SignedDecision, error)
	Leave(id string)
	// LeaveCut is Leave for a request the gate's stop cut: its ticket counts it as cut.
	LeaveCut(id string)
	// BindIssued has the console bind a Claude login the gate saw issued to a container.
	BindIssued(ctx context.Context, i hubapi.Issued) error
}

// bodyPreview is how much of a held body a ticket shows.
const bodyPreview = 4 << 10

// refreshWait bounds the wait for the policy after an approval that bound a credential.
const refreshWait = 5 * time.Second

// asked is what asking a human came to: go (the request goes out), or a refusal.
type asked struct {
	refusal *policy.Decision
	body    []byte // the held body, to send on
}

// ticketHeaders renders the end-to-end headers for a ticket: sorted, masked, escaped. A value is
// masked for what it holds, never for its header's name (see maskHeader).
func ticketHeaders(h http.Header, in *judge.Checks) []hubapi.Header {
	var d *secrets.Detector
	if in != nil {
		d = in.Secrets
	}
	out := make([]hubapi.Header, 0, len(h))
	for name, vals := range h {
		for _, v := range vals {
			mn, mv := maskHeader(d, name, v)
			out = append(out, hubapi.Header{Name: display.Escape(mn, false), Value: display.Escape(mv, false)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// maskHeader masks the credentials in a header for a person to read: those d recognises (the
// built-in shapes when d is nil), and the values that are credentials by construction
// (Authorization, Proxy-Authorization, each cookie's value). A name never hides a value: an agent
// could otherwise carry anything past the human in "X-Session-Data".
func maskHeader(d *secrets.Detector, name, value string) (string, string) {
	if d == nil {
		return secrets.ShowHeader(name, value)
	}
	return d.ShowHeader(name, value)
}

// askHuman asks the hub about a request the policy asks about and holds it up to the policy's
// hold time. It returns nil to let the request go, or the refusal to answer. ex is updated with
// the ticket and, for a decision, the approver.
func (g *Gate) askHuman(ctx context.Context, ex *exchange, res judge.Result, pol *policy.Policy, req hubapi.AskRequest) *policy.Decision {
	d := g.askHuman1(ctx, ex, res, pol, req)
	if d == nil && res.Bind != nil && g.cfg.Refresh != nil {
		// The approval bound the credential at the console: take the binding before this
		// request's answer reaches the agent, whose next request then passes.
		rctx, cancel := context.WithTimeout(ctx, refreshWait)
		g.cfg.Refresh(rctx)
		cancel()
	}
	if d != nil {
		r := judge.AskRefused(res.Rule, *d)
		d = &r
	}
	return d
}

func (g *Gate) askHuman1(ctx context.Context, ex *exchange, res judge.Result, pol *policy.Policy, req hubapi.AskRequest) *policy.Decision {
	if g.hub == nil || !g.hub.Connected() {
		d := judge.NoConsole(res.Decision)
		return &d
	}
	if g.stopCtx.Err() != nil {
		d := judge.Stopping(res.Decision)
		return &d
	}
	// A place in the journal of held requests first: a request is held only with its record
	// assured, whatever ends the hold (heldjournal.go).
	slot, ok := g.holds.reserve(res.Container)
	if !ok {
		d := judge.HeldFull(res.Decision, res.Container, maxHeldPerContainer, maxHeldAll)
		return &d
	}
	held := false
	defer func() {
		if !held {
			slot.end(false)
		}
	}()
	req.Container, req.Agent, req.Rule, req.Reason = res.Container, ex.rec.Agent, res.Rule, res.Reason
	req.MaxPending = pol.Settings.MaxPending
	ans, err := g.hub.Ask(ctx, req)
	if err != nil {
		// The hub's address and error are the log's; the agent reads fixed text.
		g.log.Warn("hub: ask failed", logID, ex.rec.ID, "err", err)
		d := judge.HubFailed(res.Decision)
		return &d
	}
	id := ans.Ticket.ID
	ex.rec.Ticket = id
	switch ans.Outcome {
	case hubapi.OutcomeApproved:
		ex.rec.Approver = ans.Signed.By
		return nil
	case hubapi.OutcomeDenied:
		return g.denied(ex, res, ans.Signed)
	case hubapi.OutcomeExpired:
		return timedOut(res, id)
	case hubapi.OutcomeLimit:
		d := judge.AskLimit(res.Decision, res.Container, pol.Settings.MaxPending)
		return &d
	}
	// Held from here: the journal has the request until the hold ends.
	if err := slot.write(&ex.rec); err != nil {
		g.hub.Leave(id)
		g.log.Error("gate: a request cannot be held: its journal entry could not be written", logID, ex.rec.ID, "ticket", id, "err", err)
		d := judge.NoAudit(err)
		return &d
	}
	held = true
	g.waits.Add(1)
	cutByStop := false
	defer func() { slot.end(cutByStop) }()
	if ci := infoFrom(ctx); ci != nil && ci.watch != nil {
		var stop func()
		ctx, stop = ci.watch(ctx)
		defer stop()
	}
	hctx, cancel := context.WithTimeout(ctx, pol.Settings.Hold)
	defer cancel()
	hctx, stopped := context.WithCancelCause(hctx)
	defer stopped(nil)
	defer context.AfterFunc(g.stopCtx, func() { stopped(errGateStopping) })()
	t, err := g.hub.Wait(hctx, id)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), errGateStopping) {
		// The gate stops: the request is answered E_PENDING (its retry finds the ticket), its
		// record says the restart cut it, and the ticket counts it as cut.
		g.hub.LeaveCut(id)
		cutByStop = true
		slot.stopCut()
		ex.cutSlot = slot
		ex.rec.Detail = cutDetail(id, "answered E_PENDING: the retry finds the ticket")
		d := judge.Restarting(res.Decision, id)
		return &d
	}
	if err != nil {
		g.hub.Leave(id)
		if ctx.Err() != nil {
			d := judge.ClientGone(res.Rule)
			return &d
		}
		d := judge.Held(res.Decision, id, pol.Settings.Hold)
		return &d
	}
	switch t.Status {
	case hubapi.Expired:
		return timedOut(res, id)
	case hubapi.Approved, hubapi.Denied:
		sd, err := g.hub.Claim(ctx, id, req.Fingerprint)
		if err != nil {
			g.log.Warn("hub: claim failed", logID, ex.rec.ID, "ticket", id, "err", err)
			d := judge.ClaimFailed(res.Rule, id)
			return &d
		}
		if sd.Verdict == hubapi.Denied {
			return g.denied(ex, res, sd)
		}
		ex.rec.Approver = sd.By
		return nil
	}
	d := judge.StillPending(res.Rule, id)
	return &d
}

func (g *Gate) denied(ex *exchange, res judge.Result, sd *hubapi.SignedDecision) *policy.Decision {
	ex.rec.Approver = sd.By
	d := judge.Denied(res.Rule, sd.Reason)
	return &d
}

func timedOut(res judge.Result, id string) *policy.Decision {
	d := judge.TimedOut(res.Rule, id)
	return &d
}

// askRequest asks about a plain or decrypted request whose body the gate holds (read by
// readBody): it fingerprints exactly what goes out if approved (the normalised request, before
// an injected credential) and describes it, masked, for the ticket.
func (g *Gate) askRequest(r *http.Request, ex *exchange, v *judge.Request, res judge.Result, pol *policy.Policy, in *judge.Checks) *policy.Decision {
	// The judge names the fingerprint of an MCP call (its call, whatever its id); any other
	// request is keyed by exactly what goes out if approved.
	fp := res.Fingerprint
	if fp == "" {
		u := *r.URL
		u.Host = ex.target.Addr()
		fp = fingerprint.Of(&fingerprint.Request{Container: res.Container, Method: v.Method, URL: u.String(),
			MediaType: v.MediaType, Header: v.Header, Body: v.Body})
	}
	preview := display.Escape(display.Truncate(mask(in, string(v.Body)), bodyPreview), true)
	req := hubapi.AskRequest{Kind: hubapi.KindRequest, Method: v.Method, URL: ex.rec.URL, Headers: ticketHeaders(v.Header, in),
		BodyPreview: preview, BodySize: int64(len(v.Body)), Fingerprint: fp, Red: res.Red}
	var warn []string
	if b := res.Bind; b != nil {
		req.Bind = &hubapi.Bind{Container: b.Container, Hash: b.Hash}
		warn = append(warn, claudeapi.BindWarning(b.Kind, b.Container))
	}
	if c := mcpCall(res, in); c != nil {
		req.MCP = c
		what := c.Method
		if c.Tool != "" {
			what += " of " + strconv.Quote(c.Tool)
		}
		warn = append(warn, fmt.Sprintf("MCP call: %s on server %s. Approving frees this call with these arguments once, whatever its JSON-RPC id; a call with another argument asks again.", display.Escape(what, false), display.Escape(c.Server, false)))
	}
	switch {
	case res.Rule == judge.RuleHeuristics:
		warn = append(warn, "Looks like data leaving: "+res.Reason)
	case len(res.Findings) > 0 && res.MCP != nil:
		warn = append(warn, "MCP: "+display.Escape(strings.Join(res.Findings, "; "), false))
	case len(res.Findings) > 0:
		warn = append(warn, "Claude API: "+strings.Join(res.Findings, "; "))
	}
	if v.Override != "" {
		warn = append(warn, fmt.Sprintf("The request names the method %s in an override; it was decided as both %s and %s.", display.Escape(v.Override, false), v.Method, display.Escape(v.Override, false)))
	}
	if w := g.mcp.ticketWarning(res); w != "" {
		warn = append(warn, w)
	}
	req.Warning = strings.Join(warn, " ")
	return g.askHuman(r.Context(), ex, res, pol, req)
}

// mask hides the credentials the checks know in s (the built-in shapes alone without them).
func mask(in *judge.Checks, s string) string {
	if in != nil && in.Secrets != nil {
		return in.Secrets.MaskText(s)
	}
	return secrets.MaskText(s)
}

// mcpCall is the MCP call a ticket asks about, when the judge keyed the request by its call:
// the server, the method and tool, and the arguments and other params as the fingerprint
// covers them, pretty-printed, masked and escaped.
func mcpCall(res judge.Result, in *judge.Checks) *hubapi.MCPCall {
	m := res.MCP
	if m == nil || m.Fingerprint == "" || res.Fingerprint != m.Fingerprint || len(m.Messages) != 1 {
		return nil
	}
	msg := m.Messages[0]
	c := &hubapi.MCPCall{Server: m.Endpoint, Method: msg.Method}
	if msg.HasTarget {
		c.Tool = msg.Target
	}
	pretty := func(canon []byte) string {
		if len(canon) == 0 || string(canon) == "{}" {
			return ""
		}
		var b bytes.Buffer
		if json.Indent(&b, canon, "", "  ") != nil {
			b.Reset()
			b.Write(canon)
		}
		return display.Escape(display.Truncate(mask(in, b.String()), bodyPreview), true)
	}
	c.Arguments, c.Params = pretty(msg.Arguments), pretty(msg.Rest)
	if msg.Arguments != nil && c.Arguments == "" {
		c.Arguments = "{}"
	}
	return c
}

// askConnect asks about a CONNECT decided at the domain.
func (g *Gate) askConnect(r *http.Request, ex *exchange, res judge.Result, pol *policy.Policy) *policy.Decision {
	target := ex.target.Addr()
	fp := fingerprint.Of(&fingerprint.Request{Container: res.Container, Method: http.MethodConnect, URL: target})
	grant := pol.Settings.ConnectGrant
	req := hubapi.AskRequest{Kind: hubapi.KindConnect, Method: http.MethodConnect, URL: target, Fingerprint: fp,
		Host: ex.target.Host, Port: ex.target.Port, Grant: grant,
		Warning: fmt.Sprintf("Approving opens a tunnel from %s to %s for %s: reads and writes both pass, unseen.", res.Container, target, grant.Round(time.Second))}
	return g.askHuman(r.Context(), ex, res, pol, req)
}
