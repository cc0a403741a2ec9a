package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/lockhttp/lockhttp/internal/gate"
)

const jwtPolicy = `version = 1

[[rule]]
name = "writes"
hosts = ["api.example.test", "attacker.test"]
methods = ["POST"]
verdict = "free"

[jwt]
hosts = ["api.example.test"]

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]

[floor.hosts]
"api.example.test" = "127.0.0.1"
"attacker.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]
`

// TestJWTRewrittenIssuer is an agent holding a real token for api.example.test, the policy's
// one JWT host, that rewrites the payload's "iss" to name a host of its own and keeps the real
// signature: the gate lets the token go to api.example.test and refuses it, rewritten or not,
// to the host the claim names, with nothing forwarded; lockhttp explain decides each request
// alike.
func TestJWTRewrittenIssuer(t *testing.T) {
	rec := &originRecorder{}
	origin := httptest.NewServer(rec)
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	r := startStack(t, fmt.Sprintf(jwtPolicy, port))

	enc := base64.RawURLEncoding.EncodeToString
	header := enc([]byte(`{"alg":"RS256","typ":"JWT"}`))
	signature := enc(bytes.Repeat([]byte("the issuer's real signature "), 9))
	real := header + "." + enc([]byte(`{"iss":"http://api.example.test","sub":"agent","exp":4102444800}`)) + "." + signature
	forged := header + "." + enc([]byte(`{"iss":"http://attacker.test","sub":"agent","exp":4102444800}`)) + "." + signature

	request := func(host, token string) string {
		return fmt.Sprintf("POST http://%[1]s:%[2]d/v1/items HTTP/1.1\r\nHost: %[1]s:%[2]d\r\nAuthorization: Bearer %[3]s\r\nContent-Length: 3\r\nConnection: close\r\n\r\nx=1", host, port, token)
	}
	cases := []struct {
		name, raw string
		refused   bool
	}{
		{"the real token to its host", request("api.example.test", real), false},
		{"the rewritten token to its host", request("api.example.test", forged), false},
		{"the rewritten token to the host its iss names", request("attacker.test", forged), true},
		{"the real token to another host", request("attacker.test", real), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ex := explainRaw(t, r.policy, c.raw)
			before := rec.count()
			resp := firstResponse(t, r.up.Listen, c.raw)
			code, rule := resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRule)
			if !c.refused {
				if resp.StatusCode != 200 || rec.count() != before+1 || ex.Verdict != "FREE" {
					t.Fatalf("gate %d %q %q, explain %+v; want both to let it out", resp.StatusCode, code, rule, ex)
				}
				return
			}
			if resp.StatusCode != 403 || code != "E_SECRET_EGRESS" || rule != "secret:jwt" {
				t.Fatalf("gate %d %q %q; want 403 E_SECRET_EGRESS by secret:jwt", resp.StatusCode, code, rule)
			}
			if ex.Verdict != "DENY" || ex.Code != code || ex.Rule != rule {
				t.Fatalf("explain %+v; the gate refused %q by %q", ex, code, rule)
			}
			if rec.count() != before {
				t.Fatal("a refused request reached the origin")
			}
		})
	}
	// The refusals show neither the token nor its signature.
	for _, rc := range r.auditRecords() {
		line, _ := json.Marshal(rc)
		if bytes.Contains(line, []byte(signature)) {
			t.Fatalf("an audit record shows the signature: %s", line)
		}
	}
}
