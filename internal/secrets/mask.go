// Package secrets finds credentials in requests and masks them wherever the gate writes a
// request down (audit, logs, refusal bodies).
package secrets

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/percent"
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
	b := make([]byte, 0, 32)
	for i := 0; i < len(name); i++ {
		if c := name[i]; c != '-' && c != '_' {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
	}
	n := string(b)
	for _, s := range sensitiveParams {
		if n == s || strings.HasSuffix(n, s) && (s == "token" || s == "secret" || s == "password" || s == "apikey" || s == "signature") {
			return true
		}
	}
	return false
}

// Mask replaces a secret value with its kind and a short hash, so that two records of the same
// value can be matched without showing it: "[token:3f2a9c1b]". The hash is Finding.Hash.
func Mask(kind, value string) string {
	return "[" + kind + ":" + hash8(value) + "]"
}

// hash8 is the first 8 hex digits of the SHA-256 of v.
func hash8(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:4])
}

// defaultDetector knows the built-in shapes only; MaskURL uses it.
var defaultDetector = func() *Detector {
	d, err := NewDetector(Config{})
	if err != nil {
		panic(err)
	}
	return d
}()

// MaskURL renders u for the audit and refusal bodies with user info, the values of
// credential-like query parameters and the built-in credential shapes masked; it is
// (*Detector).MaskURL of a detector without custom patterns or injected secrets.
func MaskURL(u *url.URL) string { return defaultDetector.MaskURL(u) }

// MaskText is (*Detector).MaskText with the built-in shapes only.
func MaskText(s string) string { return defaultDetector.MaskText(s) }

// MaskURL renders u for the audit and refusal bodies with user info and the values of
// credential-like query parameters masked, and every credential the detector knows masked
// wherever it stands in the host, path, query or fragment (also percent-encoded).
func (d *Detector) MaskURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.User != nil {
		c.User = url.User(Mask("userinfo", c.User.String()))
	}
	if c.Opaque != "" {
		c.Opaque = d.MaskText(c.Opaque)
	}
	c.Host = d.MaskText(c.Host)
	if ep := c.EscapedPath(); ep != "" {
		if mp := d.maskPath(slackHookHost(&c), ep); mp != ep {
			c.RawPath = mp
			if p, err := url.PathUnescape(mp); err == nil {
				c.Path = p
			} else {
				c.Path = mp
			}
		}
	}
	if c.RawQuery != "" {
		c.RawQuery = d.maskQuery(c.RawQuery)
	}
	if c.Fragment != "" {
		ef := c.EscapedFragment()
		if mf := d.maskQuery(ef); mf != ef {
			c.RawFragment = mf
			if f, err := url.PathUnescape(mf); err == nil {
				c.Fragment = f
			} else {
				c.Fragment = mf
			}
		}
	}
	return c.String()
}

// slackHookHost reports whether u's host is Slack's webhook host: as the floor reads it, or, for a
// host the floor refuses (which never goes out, but whose record is kept), as net/url splits it,
// in any case and with final dots. Masking takes the wider reading.
func slackHookHost(u *url.URL) bool {
	if h := floor.HostOf(u.Host); h != "" {
		return h == "hooks.slack.com"
	}
	return strings.EqualFold(strings.TrimRight(u.Hostname(), "."), "hooks.slack.com")
}

// maskPath masks the credentials in an escaped path, segment by segment. A Slack webhook's
// path (slack: the host is hooks.slack.com) is the credential itself.
func (d *Detector) maskPath(slack bool, ep string) string {
	if slack && strings.HasPrefix(ep, "/services/") && len(ep) > len("/services/") {
		return "/services/" + url.PathEscape(Mask(string(KindSlack), "hooks.slack.com"+ep))
	}
	if d.MaskText(ep) == ep {
		return ep
	}
	segs := strings.Split(ep, "/")
	for i, s := range segs {
		if m := d.MaskText(s); m != s {
			segs[i] = url.PathEscape(m)
		}
	}
	return strings.Join(segs, "/")
}

func (d *Detector) maskQuery(q string) string {
	parts := strings.Split(q, "&")
	changed := false
	for i, p := range parts {
		name, value, ok := strings.Cut(p, "=")
		dn, err := url.QueryUnescape(name)
		if err != nil {
			dn = name
		}
		if ok && value != "" && isSensitiveParam(dn) {
			parts[i] = name + "=" + url.QueryEscape(Mask("param", value))
			changed = true
			continue
		}
		mn, mv := name, value
		if m := d.MaskText(name); m != name {
			mn = url.QueryEscape(m)
		}
		if m := d.MaskText(value); m != value {
			mv = url.QueryEscape(m)
		}
		if mn != name || mv != value {
			parts[i] = mn
			if ok {
				parts[i] += "=" + mv
			}
			changed = true
		}
	}
	if !changed {
		return q
	}
	return strings.Join(parts, "&")
}

// MaskText replaces every credential the detector knows (and injected values) in s with
// Mask(kind, value); for header values, tickets and body previews. A word (text between spaces,
// quotes and punctuation) that holds a credential once percent-decoded, JSON-unescaped or
// base64-decoded is replaced whole.
func (d *Detector) MaskText(s string) string {
	if s == "" {
		return s
	}
	spans := d.maskSpans(s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp.start])
		b.WriteString(Mask(string(sp.kind), sp.value))
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// span is a part of a text to mask, and the credential it holds.
type span struct {
	start, end int
	kind       Kind
	value      string
}

// maskSpans returns the spans of s to mask, in order, without overlaps.
func (d *Detector) maskSpans(s string) []span {
	f := d.newFinder(s, "", nil, unlimited)
	var spans []span
	for _, h := range f.find() {
		if !h.nested {
			spans = append(spans, span{h.off, h.off + len(h.value), h.kind, h.value})
		}
	}
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && !wordDelim(s[j]) {
			j++
		}
		if j-i >= MinInjected {
			if h, ok := d.encodedWord(s[i:j]); ok {
				// Base64 padding goes with the word.
				for j < len(s) && s[j] == '=' && strings.IndexAny(s[i:j], "%\\") < 0 {
					j++
				}
				spans = append(spans, span{i, j, h.kind, h.value})
			}
		}
		i = j + 1
	}
	if len(spans) == 0 {
		return nil
	}
	// A value found once is masked wherever else it stands, even where its shape alone would not
	// be found ("x" + an AWS key id).
	n := len(spans)
	for i := 0; i < n; i++ {
		v := spans[i].value
		if !strings.Contains(s, v) || i > 0 && slices.ContainsFunc(spans[:i], func(o span) bool { return o.value == v }) {
			continue
		}
		for at := 0; ; {
			j := strings.Index(s[at:], v)
			if j < 0 {
				break
			}
			spans = append(spans, span{at + j, at + j + len(v), spans[i].kind, v})
			at += j + len(v)
		}
	}
	slices.SortStableFunc(spans, func(a, b span) int { return a.start - b.start })
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.start < last.end {
			if sp.end > last.end {
				last.end = sp.end
				last.value = s[last.start:last.end]
			}
			continue
		}
		out = append(out, sp)
	}
	return out
}

// wordDelim separates the words of a text that MaskText decodes.
func wordDelim(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '"', '\'', '`', ',', ';', '&', '=', '<', '>', '(', ')', '{', '}', '[', ']', '|':
		return true
	}
	return false
}

// encodedWord returns the first credential in w percent-decoded (once or twice), JSON-unescaped
// (once or twice) or base64-decoded.
func (d *Detector) encodedWord(w string) (hit, bool) {
	try := func(v string) (hit, bool) {
		f := d.newFinder(v, "", nil, 1)
		if hs := f.find(); len(hs) > 0 && !hs[0].nested {
			return hs[0], true
		}
		return hit{}, false
	}
	if strings.IndexByte(w, '%') >= 0 || strings.IndexByte(w, '+') >= 0 {
		// '+' is a space in a query or form; try it both ways (base64 uses it too).
		for _, plus := range []bool{false, true} {
			d1 := percent.Decode(w, plus)
			if d1 == w {
				continue
			}
			if h, ok := try(d1); ok {
				return h, true
			}
			if d2 := percent.Decode(d1, plus); d2 != d1 {
				if h, ok := try(d2); ok {
					return h, true
				}
			}
		}
	}
	if strings.IndexByte(w, '\\') >= 0 {
		u1 := string(unescapeJSON(nil, w))
		if h, ok := try(u1); ok {
			return h, true
		}
		if strings.IndexByte(u1, '\\') >= 0 {
			if h, ok := try(string(unescapeJSON(nil, u1))); ok {
				return h, true
			}
		}
	}
	if len(w) >= 12 {
		if b, ok := decodeBase64(w); ok && isText(b) {
			return try(string(b))
		}
	}
	return hit{}, false
}

// sensitiveHeaders are masked whole by MaskHeader; so is any header whose name contains one of
// sensitiveHeaderWords.
var (
	sensitiveHeaders     = []string{"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
	sensitiveHeaderWords = []string{"token", "secret", "key", "auth", "password", "passwd", "session", "signature", "credential"}
)

func sensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	if slices.Contains(sensitiveHeaders, n) {
		return true
	}
	for _, w := range sensitiveHeaderWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// MaskHeader masks a header value: all of Authorization, Proxy-Authorization, Cookie,
// Set-Cookie, X-Api-Key and any header whose name holds token, secret, key, auth, password,
// passwd, session, signature or credential (an authorization scheme such as "Bearer" is kept);
// others through MaskText. A value that is exactly one known credential is masked with its kind,
// so that its hash matches the Finding's.
func (d *Detector) MaskHeader(name, value string) string {
	if value == "" {
		return value
	}
	if !sensitiveHeader(name) {
		return d.MaskText(value)
	}
	prefix, v := "", value
	if isAuthorization(name) {
		if scheme, rest, ok := strings.Cut(strings.TrimSpace(value), " "); ok && authScheme(scheme) {
			prefix, v = scheme+" ", strings.TrimSpace(rest)
		}
	}
	return prefix + d.maskWhole(v)
}

// authSchemes are the authorization schemes MaskHeader leaves readable.
var authSchemes = []string{"basic", "bearer", "token", "digest", "negotiate", "ntlm", "dpop", "oauth",
	"hoba", "mutual", "ssws", "aws4-hmac-sha256", "googlelogin"}

// authScheme reports whether s is a well-known authorization scheme name ("Bearer",
// "AWS4-HMAC-SHA256"): anything else may be a credential.
func authScheme(s string) bool {
	return len(s) <= 20 && slices.Contains(authSchemes, strings.ToLower(s))
}

// ShowHeader renders a header for a person to read (a ticket) with the built-in credential
// shapes masked; it is (*Detector).ShowHeader of a detector without custom patterns or injected
// secrets.
func ShowHeader(name, value string) (string, string) { return defaultDetector.ShowHeader(name, value) }

// ShowHeader renders a header for a person to read (a ticket): the name and the value stay
// readable, with every credential the detector knows masked in each (MaskText). Unlike
// MaskHeader, a name never hides a value: the agent chooses its header names, and a value hidden
// because of one ("X-Session-Data") would carry data past the person. Only the values that are
// credentials by construction are masked whole: Authorization and Proxy-Authorization (a
// well-known scheme such as "Bearer" stays readable; without one the whole value is masked, as it
// may be a bare key), and the value of each cookie in Cookie (the cookie names stay readable).
// A value that is exactly one known credential is masked with its kind, as by MaskHeader.
func (d *Detector) ShowHeader(name, value string) (string, string) {
	shown := d.MaskText(name)
	switch {
	case value == "":
		return shown, value
	case isAuthorization(name):
		return shown, d.MaskHeader(name, value)
	case strings.EqualFold(name, "Cookie"):
		return shown, d.maskCookies(value)
	}
	return shown, d.MaskText(value)
}

// maskCookies masks the value of each cookie of a Cookie header ("a=1; b=2"), keeping the names;
// a pair without '=' is masked whole.
func (d *Detector) maskCookies(v string) string {
	pairs := strings.Split(v, ";")
	for i, p := range pairs {
		lead := p[:len(p)-len(strings.TrimLeft(p, " \t"))]
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		name, val, ok := strings.Cut(p, "=")
		switch {
		case !ok:
			pairs[i] = lead + d.maskWhole(p)
		case val == "":
			pairs[i] = lead + d.MaskText(name) + "="
		default:
			pairs[i] = lead + d.MaskText(name) + "=" + d.maskWhole(val)
		}
	}
	return strings.Join(pairs, ";")
}

// maskWhole masks all of v: with its kind when v is exactly one known credential (so that the
// hash matches the Finding's), as "secret" otherwise.
func (d *Detector) maskWhole(v string) string {
	kind := "secret"
	f := d.newFinder(v, "", nil, unlimited)
	if hs := f.find(); len(hs) > 0 && hs[0].value == v && !hs[0].nested {
		kind = string(hs[0].kind)
	}
	return Mask(kind, v)
}
