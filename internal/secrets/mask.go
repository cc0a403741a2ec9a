// Package secrets finds credentials in requests and masks them wherever the gate writes a
// request down (audit, logs, refusal bodies).
package secrets

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
)

// sensitiveParams are query parameter names (lower case, compared after removing '-' and '_')
// whose values are credentials often enough to be masked always.
var sensitiveParams = []string{
	"token", "accesstoken", "refreshtoken", "idtoken", "authtoken", "apikey", "key", "secret",
	"clientsecret", "password", "passwd", "pwd", "pass", "auth", "authorization", "signature", "sig",
	"credential", "credentials", "session", "sessionid", "sid", "code", "jwt", "bearer", "privatekey",
	"xamzsignature", "xamzcredential", "xamzsecuritytoken", "xgoogsignature", "xgoogcredential",
}

func isSensitiveParam(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(name))
	for _, s := range sensitiveParams {
		if n == s || strings.HasSuffix(n, s) && (s == "token" || s == "secret" || s == "password" || s == "apikey" || s == "signature") {
			return true
		}
	}
	return false
}

// Mask replaces a secret value with its kind and a short hash, so that two records of the same
// value can be matched without showing it: "[token:3f2a9c1b]".
func Mask(kind, value string) string {
	sum := sha256.Sum256([]byte(value))
	return "[" + kind + ":" + hex.EncodeToString(sum[:4]) + "]"
}

// MaskURL renders u for the audit and refusal bodies with user info and the values of
// credential-like query parameters masked.
func MaskURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.User == nil && u.RawQuery == "" {
		return u.String()
	}
	c := *u
	if c.User != nil {
		c.User = url.User(Mask("userinfo", c.User.String()))
	}
	if c.RawQuery != "" {
		c.RawQuery = maskQuery(c.RawQuery)
	}
	return c.String()
}

func maskQuery(q string) string {
	parts := strings.Split(q, "&")
	changed := false
	for i, p := range parts {
		name, value, ok := strings.Cut(p, "=")
		if !ok || value == "" {
			continue
		}
		dn, err := url.QueryUnescape(name)
		if err != nil {
			dn = name
		}
		if isSensitiveParam(dn) {
			parts[i] = name + "=" + url.QueryEscape(Mask("param", value))
			changed = true
		}
	}
	if !changed {
		return q
	}
	return strings.Join(parts, "&")
}
