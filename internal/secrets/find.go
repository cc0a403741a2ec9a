package secrets

import (
	"encoding/base64"
	"slices"
	"strings"
)

// Character classes of the token alphabets, as bits of class.
const (
	cBase62   uint16 = 1 << iota // A-Z a-z 0-9
	cB64URL                      // base62, '-', '_'
	cUpperNum                    // A-Z 0-9
	cLetter                      // A-Z a-z
	cB64Std                      // base62, '+', '/'
	cWord                        // base62, '_'
	cSlack                       // base62, '-'
	cUpper                       // A-Z
	cLower                       // a-z
	cDigit                       // 0-9
	cPEM                         // base64 standard, '=', whitespace, '\\' (escaped line ends)
)

var class = func() (t [256]uint16) {
	for c := 0; c < 256; c++ {
		var m uint16
		switch {
		case 'A' <= c && c <= 'Z':
			m = cBase62 | cB64URL | cUpperNum | cLetter | cB64Std | cWord | cSlack | cUpper | cPEM
		case 'a' <= c && c <= 'z':
			m = cBase62 | cB64URL | cLetter | cB64Std | cWord | cSlack | cLower | cPEM
		case '0' <= c && c <= '9':
			m = cBase62 | cB64URL | cUpperNum | cB64Std | cWord | cSlack | cDigit | cPEM
		case c == '-':
			m = cB64URL | cSlack
		case c == '_':
			m = cB64URL | cWord
		case c == '+' || c == '/':
			m = cB64Std | cPEM
		case c == '=' || c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\\':
			m = cPEM
		}
		t[c] = m
	}
	return t
}()

// Longest values taken, so that the work spent on one candidate is bounded.
const (
	maxToken   = 512       // API keys and tokens
	maxJWTHead = 4096      // a JWT's header segment
	maxPEM     = 16 << 10  // a PEM block searched for its END line
	maxJWTBody = 64 << 10  // a JWT payload decoded to search what it carries
	maxHits    = 256       // hits kept per text for each of: allowed for the host, refused
	unlimited  = 1<<31 - 1 // hit cap for masking
)

// hit is one credential found in one text: where it starts in that text, its kind, value and
// the hosts it belongs to. The value points into the text until the scan clones it.
type hit struct {
	kind  Kind
	value string
	hosts []string
	off   int
	// nested: found inside the decoded segments of a JWT that starts at off; the value is not
	// in the text itself.
	nested bool
}

// finder finds the credentials in one text.
type finder struct {
	d    *Detector
	s    string
	hits []hit
	// host is where the request goes; hits are capped separately by whether they may go there.
	host              string
	allowed, refused  int
	capAllowed, capRe int
	work              int
	// next "-----END " at or after pemFrom (pemAt < 0: none).
	pemFrom, pemAt int
	awsDone        int // end of the text examined for AWS secret keys
	depth          int // JWTs this text is nested in
}

func (d *Detector) newFinder(s, host string, hits []hit, limit int) finder {
	return finder{d: d, s: s, hits: hits, host: host, capAllowed: limit, capRe: limit, pemFrom: -1}
}

// find appends the hits in f.s, in the order of their offsets.
func (f *finder) find() []hit {
	s := f.s
	f.work += len(s)
	if len(s) >= 20 {
		f.underscores()
		f.dashes()
		f.capitalA()
		f.jwts('y')
		f.jwts('w')
		f.slackHooks()
	}
	for i := range f.d.injected {
		in := &f.d.injected[i]
		f.work += len(s)
		for at := 0; ; {
			j := in.value.index(s[at:])
			if j < 0 {
				break
			}
			f.emit(in.kind, at+j, at+j+len(in.value.s), nil)
			at += j + len(in.value.s)
		}
	}
	for i := range f.d.custom {
		c := &f.d.custom[i]
		if c.prefix.s != "" && c.prefix.index(s) < 0 {
			continue
		}
		f.work += len(s)
		for _, loc := range c.re.FindAllStringIndex(s, 64) {
			if loc[1] > loc[0] {
				f.emit(c.kind, loc[0], loc[1], c.hosts)
			}
		}
	}
	if len(f.hits) > 1 {
		slices.SortStableFunc(f.hits, func(a, b hit) int { return a.off - b.off })
	}
	return f.hits
}

func (f *finder) emit(k Kind, start, end int, hosts []string) {
	f.push(hit{kind: k, value: f.s[start:end], hosts: hosts, off: start})
}

func (f *finder) push(h hit) {
	if hostMatch(h.hosts, f.host) {
		if f.allowed >= f.capAllowed {
			return
		}
		f.allowed++
	} else {
		if f.refused >= f.capRe {
			return
		}
		f.refused++
	}
	f.hits = append(f.hits, h)
}

// run counts the bytes of s from i that are in class m, up to max.
func (f *finder) run(i int, m uint16, max int) int {
	s := f.s
	n := 0
	for i+n < len(s) && n < max && class[s[i+n]]&m != 0 {
		n++
	}
	f.work += n
	return n
}

// is reports whether s[i] exists and is in class m.
func is(s string, i int, m uint16) bool { return i >= 0 && i < len(s) && class[s[i]]&m != 0 }

// joined reports whether the byte at i, just before a candidate, is in class m and so joins
// the candidate to a longer word. The letter of a JSON or C escape ("\n", "\t") does not: the
// raw text of a JSON string is scanned as written, and there a key after an escaped line end
// stands alone.
func joined(s string, i int, m uint16) bool {
	if !is(s, i, m) {
		return false
	}
	if i > 0 && s[i-1] == '\\' {
		switch s[i] {
		case 'n', 'r', 't', 'b', 'f':
			return false
		}
	}
	return true
}

// has reports whether some byte of v is in class m.
func has(v string, m uint16) bool {
	for i := 0; i < len(v); i++ {
		if class[v[i]]&m != 0 {
			return true
		}
	}
	return false
}

// mixed reports whether a random-looking token body holds a digit and an upper-case letter,
// which every real key of that length does and words joined by hyphens rarely do.
func mixed(v string) bool { return has(v, cDigit) && has(v, cUpper) }

// underscores finds the shapes whose prefix ends in '_': ghp_ and friends, github_pat_,
// sk_live_ and friends, hf_ and api_org_.
func (f *finder) underscores() {
	s := f.s
	for i := 0; ; i++ {
		j := strings.IndexByte(s[i:], '_')
		if j < 0 {
			return
		}
		i += j
		switch {
		case i >= 3 && s[i-3] == 'g' && s[i-2] == 'h' && strings.IndexByte("pousr", s[i-1]) >= 0:
			// GitHub classic: gh[pousr]_ + 36 base62 (longer ones are allowed for).
			if n := f.run(i+1, cBase62, maxToken); n >= 36 {
				f.emit(KindGitHub, i-3, i+1+n, hostsGitHub)
			}
		case i >= 10 && s[i-10:i] == "github_pat":
			// GitHub fine-grained: github_pat_ + 22 base62 + '_' + 59 base62.
			if n := f.run(i+1, cWord, maxToken); n >= 82 {
				f.emit(KindGitHub, i-10, i+1+n, hostsGitHub)
			}
		case i >= 2 && (s[i-2] == 's' || s[i-2] == 'r') && s[i-1] == 'k' && !joined(s, i-3, cWord) &&
			(strings.HasPrefix(s[i+1:], "live_") || strings.HasPrefix(s[i+1:], "test_")):
			// Stripe secret and restricted keys: [sr]k_(live|test)_ + 24 or more base62.
			if n := f.run(i+6, cBase62, maxToken); n >= 24 {
				f.emit(KindStripe, i-2, i+6+n, hostsStripe)
			}
		case i >= 2 && s[i-2] == 'h' && s[i-1] == 'f' && !joined(s, i-3, cBase62):
			// Hugging Face: hf_ + 34 letters.
			if n := f.run(i+1, cLetter, 41); n >= 34 && n <= 40 && !is(s, i+1+n, cWord) {
				f.emit(KindHuggingFace, i-2, i+1+n, hostsHuggingFace)
			}
		case i >= 7 && s[i-7:i] == "api_org" && !joined(s, i-8, cBase62):
			// Hugging Face organisation tokens: api_org_ + 34 letters.
			if n := f.run(i+1, cLetter, 41); n >= 34 && n <= 40 && !is(s, i+1+n, cWord) {
				f.emit(KindHuggingFace, i-7, i+1+n, hostsHuggingFace)
			}
		}
	}
}

// openAIPrefixes follow "sk-" in OpenAI's current key formats.
var openAIPrefixes = [...]string{"proj-", "svcacct-", "admin-", "None-"}

// dashes finds the shapes whose prefix ends in '-': sk-ant-, sk-proj- and friends, legacy
// sk-, Slack's xox?- and PEM private key blocks.
func (f *finder) dashes() {
	s := f.s
	for i := 0; i < len(s); i++ {
		j := strings.IndexByte(s[i:], '-')
		if j < 0 {
			return
		}
		i += j
		if s[i+1:] != "" && s[i+1] == '-' {
			if strings.HasPrefix(s[i:], "-----BEGIN ") && (i == 0 || s[i-1] != '-') {
				if end := f.pem(i); end > i {
					i = end - 1
				}
			}
			continue
		}
		switch {
		case i >= 4 && s[i-4] == 'x' && (s[i-3] == 'o' && s[i-2] == 'x' && strings.IndexByte("baprse", s[i-1]) >= 0 ||
			s[i-3] == 'a' && s[i-2] == 'p' && s[i-1] == 'p'):
			// Slack: xox[baprse]-, xoxe.xox[bp]- (rotating), xapp- (app-level).
			start := i - 4
			if i >= 9 && s[i-9:i-4] == "xoxe." {
				start = i - 9
			}
			if n := f.run(i+1, cSlack, maxToken); n >= 20 && has(s[i+1:i+1+n], cDigit) {
				f.emit(KindSlack, start, i+1+n, hostsSlack)
			}
		case i >= 2 && s[i-2] == 's' && s[i-1] == 'k':
			f.skDash(i)
		}
	}
}

// skDash looks at "sk-" ending at i: Anthropic first, then OpenAI.
func (f *finder) skDash(i int) {
	s := f.s
	rest := s[i+1:]
	if strings.HasPrefix(rest, "ant-") {
		// sk-ant-api03-…, sk-ant-admin01-…, sk-ant-oat01-…, sk-ant-ort01-…: base64url.
		if n := f.run(i+5, cB64URL, maxToken); n >= 40 && mixed(s[i+5:i+5+n]) {
			f.emit(KindAnthropic, i-2, i+5+n, hostsAnthropic)
		}
		return
	}
	for _, p := range openAIPrefixes {
		if strings.HasPrefix(rest, p) {
			b := i + 1 + len(p)
			if n := f.run(b, cB64URL, maxToken); n >= 40 && mixed(s[b:b+n]) {
				f.emit(KindOpenAI, i-2, b+n, hostsOpenAI)
			}
			return
		}
	}
	// Legacy OpenAI: sk- + 48 base62, standing alone.
	if !joined(s, i-3, cBase62) {
		if n := f.run(i+1, cBase62, 49); n == 48 && !is(s, i+1+n, cB64URL) {
			f.emit(KindOpenAI, i-2, i+1+n, hostsOpenAI)
		}
	}
}

// pem looks at "-----BEGIN " at i. A private key block with at least 40 base64 characters
// in its first 256 bytes is a hit, up to the end of its END line (or of the base64 that follows
// when the END line is missing); pem returns the end of the hit, or 0.
func (f *finder) pem(i int) int {
	s := f.s
	h := i + len("-----BEGIN ")
	k := strings.Index(s[h:min(h+64, len(s))], "-----")
	if k < 0 {
		return 0
	}
	label := s[h : h+k]
	if !strings.HasSuffix(label, "PRIVATE KEY") && !strings.HasSuffix(label, "PRIVATE KEY BLOCK") {
		return 0
	}
	for j := 0; j < len(label); j++ {
		if c := label[j]; !(c == ' ' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return 0
		}
	}
	body := h + k + len("-----")
	if f.pemFrom < 0 || f.pemFrom > body || f.pemAt >= 0 && f.pemAt < body {
		f.pemFrom = body
		f.pemAt = strings.Index(s[body:], "-----END ")
		f.work += len(s) - body
		if f.pemAt >= 0 {
			f.pemAt += body
		}
	}
	var end, stop int
	if f.pemAt >= 0 && f.pemAt-body <= maxPEM {
		end = f.pemAt
		e := end + len("-----END ")
		stop = end
		if k := strings.Index(s[e:min(e+64, len(s))], "-----"); k >= 0 {
			stop = e + k + len("-----")
		}
	} else {
		end = body + f.run(body, cPEM, maxPEM)
		stop = end
	}
	n := 0
	for j := body; j < min(end, body+256); j++ {
		if class[s[j]]&cB64Std != 0 {
			n++
		}
	}
	if n < 40 {
		return 0
	}
	f.emit(KindPrivateKey, i, stop, nil)
	return stop
}

// capitalA finds AWS access key ids (AKIA, ASIA) and Google API keys (AIza).
func (f *finder) capitalA() {
	s := f.s
	for i := 0; i+4 <= len(s); i++ {
		j := strings.IndexByte(s[i:], 'A')
		if j < 0 || i+j+4 > len(s) {
			return
		}
		i += j
		switch {
		case (s[i+1] == 'K' || s[i+1] == 'S') && s[i+2] == 'I' && s[i+3] == 'A' && !joined(s, i-1, cBase62):
			// AWS: (AKIA|ASIA) + 16 [A-Z0-9], standing alone; the documentation's example
			// ids end in EXAMPLE.
			if n := f.run(i+4, cUpperNum, 17); n == 16 && !is(s, i+20, cBase62) && !strings.HasSuffix(s[i:i+20], "EXAMPLE") {
				f.emit(KindAWS, i, i+20, hostsAWS)
				f.awsSecret(i, i+20)
			}
		case s[i+1] == 'I' && s[i+2] == 'z' && s[i+3] == 'a' && !joined(s, i-1, cB64URL):
			// Google API key: AIza + 35 base64url.
			if n := f.run(i+4, cB64URL, 36); n == 35 {
				f.emit(KindGoogle, i, i+39, hostsGoogle)
			}
		}
	}
}

// awsSecret finds a secret access key (40 base64 characters standing alone, with upper and
// lower case and digits) within 256 bytes of an access key id at [a, b).
func (f *finder) awsSecret(a, b int) {
	s := f.s
	from, to := max(a-256, f.awsDone, 0), min(b+256, len(s))
	// Back up to the start of a run the window begins in.
	for lo := from - 41; from > 0 && from > lo && class[s[from-1]]&cB64Std != 0; {
		from--
	}
	for p := from; p < to; {
		if class[s[p]]&cB64Std == 0 {
			p++
			if s[p-1] == '\\' && p < len(s) && strings.IndexByte("nrtbf", s[p]) >= 0 {
				p++ // an escaped line end separates, as in a JSON string
			}
			continue
		}
		n := f.run(p, cB64Std, 41)
		q := p + n
		for q < len(s) && class[s[q]]&cB64Std != 0 { // the rest of a long run
			q++
			f.work++
		}
		v := s[p:q]
		if len(v) == 40 && (p == 0 || s[p-1] != '=') && (q == len(s) || s[q] != '=') &&
			has(v, cUpper) && has(v, cLower) && has(v, cDigit) && !strings.HasSuffix(v, "EXAMPLEKEY") {
			f.emit(KindAWS, p, q, hostsAWS)
		}
		p = q
	}
	f.awsDone = max(f.awsDone, to)
}

// jwts finds JSON Web Tokens that begin with "e" and c (a JSON object's base64url: "ey" for
// `{"` or `{ `, "ew" for `{` and a line end): three base64url segments (or five, JWE) whose
// first decodes to a JSON object with an "alg" member. It looks for c, which is rarer than 'e'.
func (f *finder) jwts(c byte) {
	s := f.s
	for i := 1; i < len(s); {
		j := strings.IndexByte(s[i:], c)
		if j < 0 {
			return
		}
		i += j
		if s[i-1] != 'e' || joined(s, i-2, cB64URL) || i >= 2 && s[i-2] == '.' {
			i++
			continue
		}
		i = f.jwt(i - 1)
	}
}

// jwt looks at a candidate at i and returns where to look next.
func (f *finder) jwt(i int) int {
	s := f.s
	n1 := f.run(i, cB64URL, maxJWTHead+1)
	e1 := i + n1
	if n1 < 16 || n1 > maxJWTHead || e1 >= len(s) || s[e1] != '.' {
		return e1
	}
	p := e1 + 1
	n2 := f.run(p, cB64URL, len(s))
	q := p + n2
	if n2 < 2 || q >= len(s) || s[q] != '.' {
		return q
	}
	end := q + 1 + f.run(q+1, cB64URL, len(s))
	// A JWE has five segments.
	if end+1 < len(s) && s[end] == '.' && is(s, end+1, cB64URL) {
		e4 := end + 1 + f.run(end+1, cB64URL, len(s))
		if e4+1 < len(s) && s[e4] == '.' && is(s, e4+1, cB64URL) {
			end = e4 + 1 + f.run(e4+1, cB64URL, len(s))
		}
	}
	hdr, err := base64.RawURLEncoding.DecodeString(s[i:e1])
	if err != nil || !jsonHasKey(string(hdr), "alg") {
		return end
	}
	var payload []byte
	if n2 <= maxJWTBody*4/3+4 {
		payload, _ = base64.RawURLEncoding.DecodeString(s[p:q])
	}
	// A JWT goes to the configured JWT hosts only. Its claims are not read for where it may go:
	// they are not verified (the gate holds no issuer keys), and whoever holds a real token can
	// rewrite its payload ("iss") and keep its signature.
	f.emit(KindJWT, i, end, f.d.jwtHosts)
	// What a JWT carries is sent too: a credential inside one is found as well, so that a
	// self-issued token is no way around the other kinds' hosts.
	f.nested(hdr, i)
	f.nested(payload, i)
	return end
}

// nested finds the credentials in a decoded JWT segment that starts at off.
func (f *finder) nested(b []byte, off int) {
	if len(b) == 0 || f.depth >= 2 {
		return
	}
	n := f.d.newFinder(string(b), f.host, nil, maxHits)
	n.depth = f.depth + 1
	for _, h := range n.find() {
		h.off, h.nested = off, true
		f.push(h)
	}
	f.work += n.work
}

var slackHook = newNeedle("hooks.slack.com/services/")

// slackHooks finds Slack incoming webhook URLs: hooks.slack.com/services/T…/B…/secret.
func (f *finder) slackHooks() {
	s := f.s
	p := slackHook.s
	for i := 0; ; {
		j := slackHook.index(s[i:])
		if j < 0 {
			return
		}
		i += j
		b := i + len(p)
		n := f.run(b, cWord, maxToken) // T…
		end := b + n
		for seg := 1; seg < 3 && end < len(s) && s[end] == '/'; seg++ {
			end++
			end += f.run(end, cWord, maxToken)
		}
		if v := s[b:end]; strings.Count(v, "/") == 2 && len(v) >= 30 && v[0] == 'T' && !placeholder(v[strings.LastIndexByte(v, '/')+1:]) {
			f.emit(KindSlack, i, end, hostsSlack)
		}
		i = max(end, i+1)
	}
}

// needle is a string to search for by its rarest byte, which strings.Index (searching by the
// first byte) does not do: in text, "hooks…" would stop at every 'h'.
type needle struct {
	s string
	k int // offset of the byte searched for
}

func newNeedle(s string) needle {
	n := needle{s: s}
	for i := 1; i < len(s); i++ {
		if commonness(s[i]) < commonness(s[n.k]) {
			n.k = i
		}
	}
	return n
}

// commonness ranks a byte by how often it stands in text, code and JSON.
func commonness(c byte) int {
	switch {
	case c == ' ':
		return 20
	case strings.IndexByte("etaoinshrdlu", c) >= 0:
		return 10
	case 'a' <= c && c <= 'z', strings.IndexByte("\"\\,.:/\n", c) >= 0:
		return 5
	case c == '_' || c == '-' || '0' <= c && c <= '9':
		return 3
	case 'A' <= c && c <= 'Z':
		return 2
	}
	return 1
}

// index returns the offset of the first n.s in h, or -1.
func (n needle) index(h string) int {
	if len(n.s) == 0 || len(h) < len(n.s) {
		return -1
	}
	c := n.s[n.k]
	for i := n.k; i < len(h); i++ {
		j := strings.IndexByte(h[i:], c)
		if j < 0 {
			return -1
		}
		i += j
		start := i - n.k
		if start+len(n.s) > len(h) {
			return -1
		}
		if h[start:start+len(n.s)] == n.s {
			return start
		}
	}
	return -1
}

// placeholder reports whether v is one character repeated, as in documentation examples
// ("XXXXXXXXXXXXXXXXXXXXXXXX").
func placeholder(v string) bool {
	return v == "" || strings.Count(v, v[:1]) == len(v)
}
