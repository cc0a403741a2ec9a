package gate

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/contentcoding"
	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// issuedReadWait bounds how long the gate waits for the whole answer of the token endpoint
// before it gives up reading it (the answer is then cut, as an origin that stalls cuts it).
const issuedReadWait = 10 * time.Second

// bindIssued reads the answer of a call of Anthropic's OAuth token endpoint (judge's
// TokenAnswer: decrypted inside the container's tunnel) for the Claude login it issues, and has
// the console bind the login's SHA-256 to the container before any of the answer reaches the
// agent: its next request with the login passes without asking. The answer goes on to the agent
// as the origin sent it, byte for byte. Only a 200 is read, at most claudeapi.MaxTokenAnswer
// bytes (decoded, if it has a Content-Encoding, to at most as many); a longer or unreadable
// answer goes on unread and binds nothing. The login itself is never logged, audited or kept: it
// is hashed and dropped here.
func (g *Gate) bindIssued(ctx context.Context, ex *exchange, resp *http.Response) {
	cb, ok := resp.Body.(*countingBody)
	if !ok || resp.StatusCode != http.StatusOK {
		return
	}
	up := cb.rc
	stop := time.AfterFunc(issuedReadWait, func() { up.Close() })
	data, err := io.ReadAll(io.LimitReader(up, claudeapi.MaxTokenAnswer+1))
	stop.Stop()
	// What was read goes first, then the rest of the answer (or the error that ended it).
	var rest io.Reader = up
	if err != nil {
		rest = errReader{err}
	}
	cb.rc = readCloser{io.MultiReader(bytes.NewReader(data), rest), up}
	if err != nil || len(data) > claudeapi.MaxTokenAnswer {
		g.log.Info("the OAuth token endpoint's answer was not read for the login it issues", logID, ex.rec.ID, "bytes", len(data), "err", err)
		return
	}
	if codings := contentcoding.Codings(resp.Header); len(codings) > 0 {
		if data, err = contentcoding.Decode(data, codings, claudeapi.MaxTokenAnswer); err != nil {
			g.log.Info("the OAuth token endpoint's answer does not decode; its login is not bound", logID, ex.rec.ID, "err", err)
			return
		}
	}
	token, ok := claudeapi.IssuedToken(data)
	if !ok {
		g.log.Info("the OAuth token endpoint's answer names no login to bind", logID, ex.rec.ID)
		return
	}
	hash := claudeapi.HashCredential(token)
	if g.hub == nil || !g.hub.Connected() {
		g.log.Warn("no hub: the login the OAuth token endpoint issued is not bound, and its first request asks", logID, ex.rec.ID)
		return
	}
	bctx, cancel := context.WithTimeout(ctx, refreshWait)
	defer cancel()
	in := hubapi.Issued{Container: ex.rec.Container, Hash: hash, Host: ex.target.Host, Request: ex.rec.ID}
	if err := g.hub.BindIssued(bctx, in); err != nil {
		g.log.Warn("the login the OAuth token endpoint issued could not be bound; its first request asks", logID, ex.rec.ID, "err", err)
		return
	}
	if g.cfg.Refresh != nil {
		// The binding is served with the policy: take it before the agent holds the login.
		g.cfg.Refresh(bctx)
	}
	ex.rec.Detail = "the Claude login this answer issues is bound to container " + ex.rec.Container + " (sha256 " + hash[:12] + "…)"
}

// errReader returns err on every read.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}
