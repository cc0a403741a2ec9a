package gate

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// waitTicket returns the one pending ticket of h that is not in seen.
func waitTicket(t *testing.T, h *hub.Hub, seen map[string]bool) hubapi.Ticket {
	t.Helper()
	var tk hubapi.Ticket
	testkit.WaitFor(t, 5*time.Second, "a new ticket", func() bool {
		for _, p := range h.Pending() {
			if !seen[p.ID] {
				seen[p.ID] = true
				tk = p
				return true
			}
		}
		return false
	})
	return tk
}

// TestApprovalBindsTheBytesShown: a chunked body (no Content-Length) is held on a ticket that
// shows its bytes; approved, the origin receives exactly those bytes under the method the ticket
// showed; the same JSON with other white space is another request, with a ticket of its own.
func TestApprovalBindsTheBytesShown(t *testing.T) {
	tg, h, _, _, _, stop := askGate(t, "5s")
	defer stop()
	c := tg.client()
	body := `{"a": 1,  "b": [1, 2]}`
	send := func(method, body string) chan *http.Response {
		// An io.Reader without a length goes out chunked.
		req, _ := http.NewRequest(method, tg.url("/thing"), io.MultiReader(strings.NewReader(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Note", "shown as sent")
		done := make(chan *http.Response, 1)
		go func() {
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				resp = &http.Response{Body: http.NoBody}
			}
			done <- resp
		}()
		return done
	}
	seen := map[string]bool{}
	done := send("put", body) // decided, shown and sent as PUT
	tk := waitTicket(t, h, seen)
	if tk.Method != "PUT" || tk.BodyPreview != body || tk.BodySize != int64(len(body)) {
		t.Fatalf("ticket shows %s %q (%d bytes); want PUT %q", tk.Method, tk.BodyPreview, tk.BodySize, body)
	}
	if _, err := h.Decide(tk.ID, tk.Fingerprint, true, "terminal:test", ""); err != nil {
		t.Fatal(err)
	}
	resp := <-done
	resp.Body.Close()
	if resp.StatusCode != 200 || tg.origin.count() != 1 {
		t.Fatalf("approved: %d, origin reached %d times", resp.StatusCode, tg.origin.count())
	}
	tg.origin.mu.Lock()
	got, gotBody := tg.origin.reqs[0], string(tg.origin.body[0])
	tg.origin.mu.Unlock()
	if got.Method != "PUT" || gotBody != body || got.Header.Get("X-Note") != "shown as sent" {
		t.Fatalf("the origin received %s %q %v; the ticket showed PUT %q", got.Method, gotBody, got.Header, body)
	}

	// Other white space: the approval does not carry over.
	done = send("PUT", `{"a":1,"b":[1,2]}`)
	tk2 := waitTicket(t, h, seen)
	if tk2.Fingerprint == tk.Fingerprint {
		t.Fatal("two bodies of other bytes share a fingerprint")
	}
	if _, err := h.Decide(tk2.ID, tk2.Fingerprint, false, "terminal:test", "no"); err != nil {
		t.Fatal(err)
	}
	resp = <-done
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_DENIED" || tg.origin.count() != 1 {
		t.Fatalf("denied: %d %s, origin reached %d times", resp.StatusCode, resp.Header.Get(HeaderCode), tg.origin.count())
	}
}
