package claudeapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// TokenPath is the path of Anthropic's OAuth token endpoint: Claude Code posts the code of a
// login, or its refresh token, there and reads the Claude login (an access token) it is issued
// from the answer.
const TokenPath = "/v1/oauth/token"

// MaxTokenAnswer bounds the answer of the token endpoint the gate reads for the login it issues
// (IssuedToken): a few hundred bytes are usual. A longer answer goes on unread, and the login in
// it is not bound.
const MaxTokenAnswer = 64 << 10

// Token lengths IssuedToken accepts: shorter is no credential, longer no login Anthropic issues.
const (
	minIssuedToken = 16
	maxIssuedToken = 4096
)

// TokenEndpoint reports whether a request calls the OAuth token endpoint: POST to TokenPath,
// written exactly so (no query string games are needed: the query is cut off), on one of the
// five hosts. Its answer names the Claude login issued to the caller (IssuedToken). The caller
// checks that the request went out over TLS to the host it names.
func TokenEndpoint(host, method, path string) bool {
	if _, known := Governs(host); !known || method != http.MethodPost {
		return false
	}
	p, _, _ := strings.Cut(path, "?")
	return p == TokenPath
}

// IssuedToken reads the Claude login a token endpoint's answer issues: the top-level
// "access_token" of a JSON object, a string of 16 to 4,096 printable ASCII characters without
// spaces (what the caller then sends as "Authorization: Bearer X"). ok is false for anything
// else: another shape, a token that could not be sent as it is, a body that is not JSON. Of a key
// written twice the last counts, as the JavaScript that Claude Code runs reads it. The
// caller reads the answer of a 200 only, bounded by MaxTokenAnswer, and keeps only
// HashCredential of the token: it never logs or stores it.
func IssuedToken(body []byte) (token string, ok bool) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return "", false
	}
	raw, found := top["access_token"]
	if !found {
		return "", false
	}
	if err := json.Unmarshal(raw, &token); err != nil {
		return "", false
	}
	if len(token) < minIssuedToken || len(token) > maxIssuedToken {
		return "", false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c >= 0x7f {
			return "", false
		}
	}
	return token, true
}
