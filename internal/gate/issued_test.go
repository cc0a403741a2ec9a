package gate

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// issuedHub is a hub that only binds issued logins.
type issuedHub struct {
	mu    sync.Mutex // guards got
	got   []hubapi.Issued
	fails error
}

func (h *issuedHub) Connected() bool { return true }
func (h *issuedHub) Ask(context.Context, hubapi.AskRequest) (hubapi.AskAnswer, error) {
	return hubapi.AskAnswer{}, errors.New("no asking here")
}
func (h *issuedHub) Wait(context.Context, string) (hubapi.Ticket, error) {
	return hubapi.Ticket{}, errors.New("no")
}
func (h *issuedHub) Claim(context.Context, string, string) (*hubapi.SignedDecision, error) {
	return nil, errors.New("no")
}
func (h *issuedHub) Leave(string)    {}
func (h *issuedHub) LeaveCut(string) {}
func (h *issuedHub) BindIssued(_ context.Context, i hubapi.Issued) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fails != nil {
		return h.fails
	}
	h.got = append(h.got, i)
	return nil
}

func (h *issuedHub) bound() []hubapi.Issued {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hub.Issued(nil), h.got...)
}

// TestTokenAnswerBindsTheLogin: the gate reads the answer of the OAuth token endpoint inside a
// decrypted tunnel, has the hub bind the login's hash to the container and takes the policy
// again before any of the answer reaches the client; the client reads the answer byte for byte
// as the origin sent it, whatever the gate made of it. An answer that is not a 200, too long,
// names no login or does not decode binds nothing; a hub that fails leaves the answer whole.
func TestTokenAnswerBindsTheLogin(t *testing.T) {
	login := "sk-ant-oat01-" + strings.Repeat("Gt5_", 20)
	answer := `{"token_type":"Bearer","access_token":"` + login + `","expires_in":28800,"refresh_token":"sk-ant-ort01-abc"}`
	var mode atomic.Value
	mode.Store("plain")
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch mode.Load() {
		case "plain":
			io.WriteString(w, answer)
		case "gzip":
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, answer)
			zw.Close()
		case "bad gzip":
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, answer)
		case "error":
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant","access_token":"`+login+`"}`)
		case "long":
			io.WriteString(w, `{"access_token":"`+login+`","pad":"`+strings.Repeat("p", claudeapi.MaxTokenAnswer)+`"}`)
		case "none":
			io.WriteString(w, `{"error":"nothing"}`)
		}
	})
	// The origin is platform.claude.com, under a root of its own the gate trusts.
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rootT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "claude root"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rootDER, _ := x509.CreateCertificate(rand.Reader, rootT, rootT, &rootKey.PublicKey, rootKey)
	root, _ := x509.ParseCertificate(rootDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafT := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"platform.claude.com"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, _ := x509.CreateCertificate(rand.Reader, leafT, root, &leafKey.PublicKey, rootKey)
	srv := httptest.NewUnstartedServer(origin)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	roots := x509.NewCertPool()
	roots.AddCert(root)

	h := &issuedHub{}
	var refreshed atomic.Int32
	tg := startTLSGateWith(t, nil, func(c *Config) {
		c.RootCAs, c.Hub = roots, h
		c.Refresh = func(context.Context) { refreshed.Add(1) }
	})
	p, err := policy.Load("p.toml", []byte(fmt.Sprintf("version = 1\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[sources]\nlocal = [\"127.0.0.0/8\"]\n", port)))
	if err != nil {
		t.Fatal(err)
	}
	tg.gate.SetPolicy(p)
	c := tg.client()
	c.Transport.(*http.Transport).DisableCompression = true // read the answer's bytes as sent
	post := func(t *testing.T) (*http.Response, []byte) {
		t.Helper()
		resp, err := c.Post(fmt.Sprintf("https://platform.claude.com:%d/v1/oauth/token", port), "application/x-www-form-urlencoded", strings.NewReader("grant_type=refresh_token&refresh_token=sk-ant-ort01-xyz"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		return resp, body
	}
	for _, tc := range []struct {
		mode  string
		binds bool
		fails error
	}{
		{"plain", true, nil},
		{"gzip", true, nil},
		{"bad gzip", false, nil},
		{"error", false, nil},
		{"long", false, nil},
		{"none", false, nil},
		{"plain", false, errors.New("the console is away")},
	} {
		t.Run(fmt.Sprintf("%s, hub failing %v", tc.mode, tc.fails != nil), func(t *testing.T) {
			mode.Store(tc.mode)
			h.mu.Lock()
			h.got, h.fails = nil, tc.fails
			h.mu.Unlock()
			before := refreshed.Load()
			// What the origin sends, as a client reads it without the gate.
			direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "platform.claude.com"}, DisableCompression: true}}
			dresp, err := direct.Post(srv.URL+"/v1/oauth/token", "application/x-www-form-urlencoded", strings.NewReader("x=1"))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := io.ReadAll(dresp.Body)
			dresp.Body.Close()

			resp, body := post(t)
			if !bytes.Equal(body, want) || resp.StatusCode != dresp.StatusCode || resp.Header.Get("Content-Encoding") != dresp.Header.Get("Content-Encoding") {
				t.Fatalf("the client read %d %q (%d bytes), the origin sends %d (%d bytes)", resp.StatusCode, resp.Header.Get("Content-Encoding"), len(body), dresp.StatusCode, len(want))
			}
			got := h.bound()
			if !tc.binds {
				if len(got) != 0 || refreshed.Load() != before {
					t.Fatalf("bound %+v, refreshed %d", got, refreshed.Load()-before)
				}
				return
			}
			id := resp.Header.Get(HeaderRequest)
			if len(got) != 1 || got[0] != (hubapi.Issued{Container: "local", Hash: claudeapi.HashCredential(login), Host: "platform.claude.com", Request: id}) {
				t.Fatalf("bound %+v; want the login's hash for local, request %s", got, id)
			}
			if refreshed.Load() != before+1 {
				t.Fatal("the policy was not taken again after the binding")
			}
		})
	}
	// The login is in no record and no log line; the record of a bound answer says so by hash.
	files, _ := filepath.Glob(filepath.Join(tg.audit, "*.jsonl"))
	var all []byte
	for _, f := range files {
		data, _ := os.ReadFile(f)
		all = append(all, data...)
	}
	if bytes.Contains(all, []byte(login)) {
		t.Fatal("the audit holds the login")
	}
	if n := bytes.Count(all, []byte("the Claude login this answer issues is bound to container local (sha256 "+claudeapi.HashCredential(login)[:12]+"…)")); n != 2 {
		t.Fatalf("%d records say the login was bound, want 2", n)
	}
}
