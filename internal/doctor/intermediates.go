package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// GatherSigner examines the signer on socket alone (lockhttp doctor --signer): a fleet's node
// signer, whose health names its intermediate and its renewals even while it refuses to sign
// (503).
func GatherSigner(ctx context.Context, socket string) *Facts {
	f := &Facts{Mode: "signer", Now: time.Now()}
	sf := &SignerFacts{Socket: socket}
	f.Signer = sf
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://signer/health", nil)
	resp, err := unixsock.Client(socket, 5*time.Second).Do(req)
	if err != nil {
		sf.Err = unwrapURL(err).Error()
		return f
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var h signer.Health
	if err := json.Unmarshal(body, &h); err != nil || h.CASHA256 == "" {
		sf.Err = fmt.Sprintf("/health answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 200)])))
		return f
	}
	sf.Health = &h
	return f
}

// assessIntermediates shows a node signer's chain (leaf, its intermediate, the root agents
// trust), the intermediate's expiry and the last renewal; a node holding none, or whose
// renewals fail, is an error or a warning with the time left.
func assessIntermediates(r *Report, f *Facts) {
	if f.Signer == nil || f.Signer.Health == nil || f.Signer.Health.Intermediate == nil {
		return
	}
	h, im := f.Signer.Health, f.Signer.Health.Intermediate
	now := f.Now
	if now.IsZero() {
		now = time.Now()
	}
	when := func(s string) string {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return "never"
		}
		d := t.Sub(now).Round(time.Second)
		switch {
		case d >= 0:
			return fmt.Sprintf("%s (in %s)", s, d)
		default:
			return fmt.Sprintf("%s (%s ago)", s, -d)
		}
	}
	notAfter, err := time.Parse(time.RFC3339, im.NotAfter)
	valid := im.SHA256 != "" && err == nil && now.Before(notAfter)
	fix := "fix: let the node reach the root signer (its --root-url) with an identity the root's --tls-node lists, and check the root's log"
	if !valid {
		last := "it never got one"
		if im.NotAfter != "" {
			last = "the last expired " + when(im.NotAfter)
		}
		r.add(Error, "intermediate", "the node signer holds no valid intermediate (%s; last request to the root: %s): every decrypted host is refused with E_NO_SIGNER; %s",
			last, orNone(im.Error), fix)
		return
	}
	r.add(OK, "chain", "leaf <- intermediate %q (sha256 %s, expires %s) <- root %q (sha256 %s): agents trust the root only",
		im.Subject, short(im.SHA256), when(im.NotAfter), h.CASubject, short(h.CASHA256))
	r.add(OK, "intermediate", "last renewal %s; next request to the root %s", when(im.Renewed), when(im.Next))
	if im.Error != "" {
		r.add(Warn, "intermediate", "the last renewal failed %s: %s; the node signs with its current intermediate until %s, then refuses every decrypted host with E_NO_SIGNER; %s",
			when(im.Failed), im.Error, when(im.NotAfter), fix)
	}
}
