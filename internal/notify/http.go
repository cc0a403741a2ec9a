package notify

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/metrics"
)

// maxDecisionBytes bounds a decision's body.
const maxDecisionBytes = 16 << 10

// Decision is the body of POST decision_url.
type Decision struct {
	Decision    string `json:"decision"` // "approve" or "deny"
	Fingerprint string `json:"fingerprint"`
	// Actor is accepted for receivers written before the approver was the channel, and
	// ignored: the approver the audit names is the channel (notify:CHANNEL), never a name from
	// the body, which whoever holds the link writes.
	Actor  string `json:"actor"`
	Reason string `json:"reason"` // told to the agent on a denial; optional
}

type apiError struct {
	Error string `json:"error"`
}

// Pattern is the route Handler serves, for the hub's mux.
const Pattern = "POST " + LinkPrefix + "{channel}/{ticket}/{token}"

// Handler serves POST LinkPrefix{channel}/{ticket}/{token}: a human channel's decision on a
// ticket. A channel that only notifies, a token that is not the ticket's on that channel, or a
// fingerprint that is not the ticket's is refused with 403 and changes nothing.
func (n *Notifier) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, id, token := r.PathValue("channel"), r.PathValue("ticket"), r.PathValue("token")
		cfg, ok := n.channelConfig(name)
		label := name // a label of the policy's channels only: a made-up name is not a series
		if !ok {
			label = "-unknown-"
		}
		refuse := func(status int, msg string) {
			n.cfg.Metrics.Decision(label, "refused")
			httpjson.Write(w, status, apiError{msg})
		}
		if !ok || !cfg.Human {
			// Checked before the token: a channel that only notifies decides nothing, whatever
			// link it was sent.
			n.log.Warn("notify: a decision on a channel that decides nothing", "channel", display.Line(name, 64), "ticket", display.Line(id, 32))
			refuse(http.StatusForbidden, "this link decides nothing: the channel is not a human one in the approved policy (human = true); decide on the terminal, with lox, or on the phone page")
			return
		}
		want := Token(n.cfg.Key, name, id)
		if subtle.ConstantTimeCompare([]byte(token), []byte(want)) != 1 {
			n.log.Warn("notify: a decision with a token that is not the ticket's", "channel", name, "ticket", display.Line(id, 32))
			refuse(http.StatusForbidden, "the link's token is not this ticket's on this channel")
			return
		}
		connlimit.Trust(r.Context())
		var d Decision
		dec := json.NewDecoder(io.LimitReader(r.Body, maxDecisionBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			refuse(http.StatusBadRequest, `bad decision: `+display.Line(err.Error(), 200)+`; send {"decision":"approve" or "deny","fingerprint":"…","reason":"…"}`)
			return
		}
		var approve bool
		switch d.Decision {
		case "approve":
			approve = true
		case "deny":
		default:
			refuse(http.StatusBadRequest, `"decision" must be "approve" or "deny"`)
			return
		}
		if d.Fingerprint == "" {
			refuse(http.StatusBadRequest, `"fingerprint" is required: the one the notification showed`)
			return
		}
		reason := display.Clean(d.Reason)
		if !approve && reason == "" {
			reason = "denied through the notification channel " + name
		}
		// The approver is the channel the policy names: who holds its links is what the
		// operator vouched for by marking it human, and the body's actor is the poster's word.
		by := "notify:" + name
		t, err := n.cfg.Hub.Decide(id, d.Fingerprint, approve, by, reason)
		switch {
		case errors.Is(err, hub.ErrFingerprint):
			refuse(http.StatusForbidden, "the fingerprint is not the ticket's: the request changed, or this is not the notification of it; nothing was decided")
			return
		case errors.Is(err, hub.ErrNotFound):
			refuse(http.StatusNotFound, hub.ErrNotFound.Error())
			return
		case errors.Is(err, hub.ErrDecided):
			refuse(http.StatusConflict, hub.ErrDecided.Error())
			return
		case err != nil:
			refuse(http.StatusBadRequest, display.Line(err.Error(), 300))
			return
		}
		n.cfg.Hub.Flush()
		outcome := metrics.OutcomeDenied
		if approve {
			outcome = metrics.OutcomeApproved
		}
		n.cfg.Metrics.Decision(name, outcome)
		n.log.Info("notify: decided through a channel", "channel", name, "ticket", t.ID, "verdict", t.Status, "by", by)
		answer := map[string]string{"ticket": t.ID, "status": string(t.Status)}
		if t.Waiting != "" {
			answer["waiting"] = t.Waiting // nothing was waiting: what the approval stands for
		}
		httpjson.Write(w, http.StatusOK, answer)
	})
}
