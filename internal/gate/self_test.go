package gate

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

func selfGet(t *testing.T, c *http.Client, url string) (*http.Response, SelfAnswer, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var a SelfAnswer
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
	}
	return resp, a, string(body)
}

func TestSelfNameIsAnsweredByTheGate(t *testing.T) {
	t.Run("decrypted", func(t *testing.T) {
		tg := startTLSGate(t, http.NotFoundHandler())
		resp, a, body := selfGet(t, tg.client(), "https://lockhttp.internal/")
		if resp.StatusCode != 200 || !a.Decrypted || a.Gate != "lockhttp" || a.Container != "local" ||
			a.PolicyVersion != tg.gate.Policy().Version || a.Request != resp.Header.Get(HeaderRequest) || a.Request == "" {
			t.Fatalf("%d %+v %s", resp.StatusCode, a, body)
		}
		// A client that does not trust the lockhttp CA fails the handshake.
		c := tg.client()
		c.Transport.(*http.Transport).TLSClientConfig.RootCAs = tg.roots
		if _, err := c.Get("https://lockhttp.internal/"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("untrusted CA: %v", err)
		}
	})
	t.Run("plain, and nothing goes out", func(t *testing.T) {
		tg := startGate(t, nil)
		resp, a, body := selfGet(t, tg.client(), "http://lockhttp.internal/anything?x=1")
		if resp.StatusCode != 200 || a.Decrypted || a.Container != "local" || tg.origin.count() != 0 {
			t.Fatalf("%d %+v %s", resp.StatusCode, a, body)
		}
		var rec map[string]any
		for _, m := range tg.records(t) {
			if m["id"] == a.Request {
				rec = m
			}
		}
		if rec == nil || rec["rule"] != judge.RuleSelf || rec["verdict"] != "FREE" {
			t.Fatalf("audit record %v", rec)
		}
	})
	t.Run("no signer: the CONNECT is refused with the reason", func(t *testing.T) {
		tg := startGate(t, nil)
		out := tg.raw(t, "CONNECT lockhttp.internal:443 HTTP/1.1\r\nHost: lockhttp.internal:443\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "without a signer") || !strings.Contains(out, "X-Lockhttp-Rule: self") {
			t.Fatal(out)
		}
	})
	t.Run("an unknown source is refused", func(t *testing.T) {
		tg := startGate(t, nil)
		p, err := policy.Load("s.toml", []byte("version = 1\n[sources]\nother = [\"10.9.0.0/16\"]\n"))
		if err != nil {
			t.Fatal(err)
		}
		tg.g.SetPolicy(p)
		resp, _, body := selfGet(t, tg.client(), "http://lockhttp.internal/")
		if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != string(policy.CodeSourceUnknown) {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		out := tg.raw(t, "CONNECT lockhttp.internal:443 HTTP/1.1\r\nHost: lockhttp.internal:443\r\n\r\n")
		if !strings.Contains(out, fmt.Sprintf("%s: %s", "X-Lockhttp-Code", policy.CodeSourceUnknown)) {
			t.Fatal(out)
		}
	})
}
