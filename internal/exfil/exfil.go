// Package exfil scores requests that the policy has decided for signs of data leaving: random
// blobs in the URL or the body, far more bytes sent to a host than received from it, and many
// new subdomains of one name.
package exfil

import (
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The defaults of Config's zero fields.
const (
	// DefaultThreshold is the score at which a request is suspect. Each of the strong signals
	// reaches it alone (a blob of about 128 base64 characters to a host the policy does not
	// trust, 64 to such a host not seen before; 1 MiB more sent than received; a body of
	// 256 KiB to a new host; the 21st subdomain of one name), while what agents routinely
	// send (digests, UUIDs, cursors of a few dozen characters, anything to a trusted host)
	// stays below it.
	DefaultThreshold = 4.0
	DefaultMaxHosts  = 10000
	DefaultWindow    = 10 * time.Minute
)

// The weights. A request's score is the sum of the points of the signals that fired; each
// signal that fired adds one reason. Points for a host the policy trusts are multiplied by
// trustedFactor.
const (
	// Blobs (see blob.go for what is a blob): blobBase points for 192 bits of estimated
	// content (32 base64 characters; a base64 character counts 6 bits, a base32 one 5, a
	// hex one 4), one point more for each doubling, at most blobMax (1,536 bits: 256 base64
	// characters). The blobs of one request count together. Digests (hex ids, integrity
	// values, URL signatures) count only the longest, at digestFactor. To a host not seen
	// before: times newHostFactor.
	blobBase      = 2.0
	blobMax       = 5.0
	digestFactor  = 0.25
	newHostFactor = 1.5

	// Bytes: with this request, the host has been sent netLimit bytes (bodies and URLs) more
	// than it sent back within the window: bytesBase points, one more for each doubling, at
	// most bytesMax. A request without a body or a long URL does not fire it. A body of
	// newHostBody bytes or more to a host not seen before: bytesBase.
	bytesBase   = 4.0
	bytesMax    = 6.0
	netLimit    = 1 << 20
	newHostBody = 256 << 10
	longURL     = 1 << 10

	// Subdomains: a subdomain (all labels left of the registrable domain) new to the window
	// that makes its registrable domain's count in the window exceed subdomainLimit:
	// subdomainBase points, plus subdomainLong if it is at least longLabel characters, plus
	// subdomainRandom if it looks encoded (see randomLabel).
	subdomainBase   = 4.0
	subdomainLong   = 1.0
	subdomainRandom = 1.0
	subdomainLimit  = 20
	longLabel       = 24

	// Long values, to a host the policy does not trust only: a query value over
	// longQueryValue bytes or a header value over longHeaderValue bytes (but Cookie and the
	// credentials of Authorization and Proxy-Authorization, which the secrets package
	// judges): longValuePoints, times newHostFactor for a host not seen before. It never
	// makes a request suspect alone.
	longValuePoints = 2.0
	longQueryValue  = 2 << 10
	longHeaderValue = 4 << 10

	trustedFactor = 0.5
)

// Config configures a Scorer. Its zero value is usable.
type Config struct {
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Threshold is the score at or above which a request is suspect. Zero, less or NaN:
	// DefaultThreshold.
	Threshold float64
	// MaxHosts bounds the hosts remembered (least recently used forgotten first), and
	// separately the registrable domains. Zero or less: DefaultMaxHosts. A host forgotten
	// is new again.
	MaxHosts int
	// Window is how far back the byte tallies and the subdomain counts look. Zero or less:
	// DefaultWindow.
	Window time.Duration
}

// Request is what Score reads of a request. It keeps no reference to it.
type Request struct {
	Host     string      // normalised host, without port
	Path     string      // escaped path
	Query    string      // raw query, without '?'
	Header   http.Header // may be nil
	Body     []byte      // up to the gate's buffer limit; may be nil
	BodySize int64       // the full size when known (may exceed len(Body)); less than len(Body): len(Body)
	Trusted  bool        // the policy trusts the host for reads
}

// Score is the exfiltration score of one request.
type Score struct {
	Value   float64 // zero or more, finite
	Suspect bool    // Value >= the threshold
	// Reasons has one line per signal that fired, in words, with its points. A reason says
	// what kind of data, how much and where; it never repeats the data. It names the
	// registrable domain, and a query parameter or header name only when short and plain.
	Reasons []string
}

// String is the score and its reasons on one line, for a log or the audit.
func (s Score) String() string {
	v := fmt.Sprintf("%.1f", s.Value)
	if s.Suspect {
		v += " (suspect)"
	}
	if len(s.Reasons) == 0 {
		return v
	}
	return v + ": " + strings.Join(s.Reasons, "; ")
}

// Scorer scores requests and remembers, within bounds, the hosts it saw. It is safe for
// concurrent use.
//
// A score is the sum of the points of the signals that fired, halved for a host the policy
// trusts:
//
//   - random blobs in the path, the query or the body: 2 points for 32 base64 characters,
//     one more for each doubling, at most 5; ×1.5 to a host not seen before; hex ids,
//     integrity values and presigned-URL signatures at a quarter; UUIDs, JWTs, git object
//     ids in git requests and short cache-busting values not at all;
//   - bytes: 1 MiB more sent to a host than received from it within the window, 4 points,
//     one more for each doubling, at most 6; or a body of 256 KiB to a host not seen
//     before, 4 points;
//   - subdomains: a subdomain that makes more than 20 of one registrable domain within the
//     window, 4 points, one more if it is long (24 characters), one more if it looks encoded;
//   - long values, to a host the policy does not trust: a query value over 2 KiB or a
//     header value over 4 KiB (not Cookie or Authorization), 2 points, ×1.5 to a new host.
type Scorer struct {
	now       func() time.Time
	threshold float64
	window    time.Duration
	slot      int64 // length of a tally slot, in nanoseconds
	seed      maphash.Seed

	mu      sync.Mutex
	hosts   *lru[host]   // guarded by mu
	domains *lru[domain] // guarded by mu
}

// New returns a Scorer that remembers nothing yet.
func New(c Config) *Scorer {
	s := &Scorer{
		now:       c.Now,
		threshold: c.Threshold,
		window:    c.Window,
		seed:      maphash.MakeSeed(),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if !(s.threshold > 0) {
		s.threshold = DefaultThreshold
	}
	if s.window <= 0 {
		s.window = DefaultWindow
	}
	s.slot = max(int64(s.window)/tallySlots, 1)
	n := c.MaxHosts
	if n <= 0 {
		n = DefaultMaxHosts
	}
	s.hosts = newLRU[host](n)
	s.domains = newLRU[domain](n)
	return s
}

// Score scores a request that is about to go out and records it: its host as seen, its
// subdomain, the bytes it sends.
func (s *Scorer) Score(r *Request) Score {
	if r == nil {
		return Score{}
	}
	var bs blobs
	scanURL(r.Path, r.Query, &bs)
	gitHex := isGit(r.Path)
	if len(r.Body) > 0 {
		body := r.Body[:min(len(r.Body), maxBodyScan)]
		scanField(body, place{part: partBody}, scanOpts{noHex: gitHex}, &bs)
	}
	var long longValue
	if !r.Trusted {
		long = longest(r.Query, r.Header)
	}
	body := max(r.BodySize, int64(len(r.Body)))
	urlBytes := int64(len(r.Path) + len(r.Query))
	st := s.record(r.Host, body+urlBytes, s.now().UnixNano())

	var sc Score
	// fire adds a signal's points and reason; newHost says whether the reason is about the
	// host being new (its points say so already).
	fire := func(points float64, reason string, newHost bool) {
		switch {
		case newHost && r.Trusted:
			reason += ", to a host not seen before that the policy trusts"
		case newHost:
			reason += ", to a host not seen before"
		case r.Trusted:
			reason += ", to a host the policy trusts"
		}
		if r.Trusted {
			points *= trustedFactor
		}
		sc.Value += points
		sc.Reasons = append(sc.Reasons, fmt.Sprintf("%s (+%.1f)", reason, points))
	}
	novelty := 1.0
	if st.newHost {
		novelty = newHostFactor
	}
	if p := bs.points(); p > 0 {
		fire(p*novelty, bs.reason(), st.newHost)
	}
	if long.n > 0 {
		fire(longValuePoints*novelty, long.reason(), st.newHost)
	}
	sentBody := body > 0 || urlBytes >= longURL
	switch {
	case sentBody && st.net >= netLimit:
		p := min(bytesMax, bytesBase+math.Log2(float64(st.net)/netLimit))
		fire(p, fmt.Sprintf("%s more sent than received within %v", size(st.net), s.window), st.newHost)
	case st.newHost && body >= newHostBody:
		fire(bytesBase, fmt.Sprintf("a %s body", size(body)), true)
	}
	if st.subNew && st.subs > subdomainLimit {
		p := subdomainBase
		what := fmt.Sprintf("the %s distinct subdomain of %q within %v", ordinal(st.subs), st.domain, s.window)
		if st.subs >= maxSubdomains {
			what = fmt.Sprintf("a new subdomain of %q, which has had %d or more within %v", st.domain, st.subs, s.window)
		}
		prefix := r.Host[:len(r.Host)-len(st.domain)-1]
		if len(prefix) >= longLabel {
			p += subdomainLong
			what += ", a long one"
		}
		if randomLabel(prefix) {
			p += subdomainRandom
			what += ", random-looking"
		}
		fire(p, what, false)
	}
	sc.Suspect = sc.Value >= s.threshold
	return sc
}

// Replied records the size of a response body received from host, for its byte tally. A
// host the scorer does not remember is ignored.
func (s *Scorer) Replied(host string, bytes int64) {
	if bytes <= 0 {
		return
	}
	epoch := s.now().UnixNano() / s.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.hosts.get(host); h != nil {
		h.count(epoch, 0, bytes)
	}
}

// seen is what the scorer's memory says of a request.
type seen struct {
	newHost bool
	net     int64  // bytes sent to the host less those received, in the window, with this request
	domain  string // the host's registrable domain, "" when none
	subNew  bool   // the host is a subdomain of domain not seen in the window
	subs    int    // subdomains of domain in the window, with this one
}

// record remembers a request to host that sends sent bytes at now (Unix nanoseconds).
func (s *Scorer) record(hostname string, sent, now int64) (st seen) {
	if hostname == "" {
		return st
	}
	s.mu.Lock()
	h := s.hosts.get(hostname)
	domKey := ""
	if h == nil {
		// A new host: find its domain and copy the names outside the lock.
		s.mu.Unlock()
		key := strings.Clone(hostname)
		dom := registrable(key)
		domKey = strings.Clone(dom)
		s.mu.Lock()
		if h = s.hosts.get(hostname); h == nil {
			st.newHost = true
			h = s.hosts.add(key)
			*h = host{domain: key[len(key)-len(dom):]}
		}
	}
	defer s.mu.Unlock()
	st.net = h.count(now/s.slot, sent, 0)
	st.domain = h.domain
	if st.domain == "" || len(hostname) == len(st.domain) {
		return st
	}
	d := s.domains.get(st.domain)
	if d == nil {
		if domKey == "" {
			domKey = strings.Clone(st.domain) // forgotten since the host was added
		}
		d = s.domains.add(domKey)
		d.subs = d.subs[:0]
	}
	prefix := hostname[:len(hostname)-len(st.domain)-1]
	st.subNew, st.subs = d.see(maphash.String(s.seed, prefix), now, int64(s.window))
	return st
}

// isGit reports whether an escaped path is a git smart-HTTP or LFS request, whose hex is
// object ids.
func isGit(path string) bool {
	return strings.HasSuffix(path, "/info/refs") ||
		strings.HasSuffix(path, "/git-upload-pack") ||
		strings.HasSuffix(path, "/git-receive-pack") ||
		strings.Contains(path, "/info/lfs/") ||
		strings.Contains(path, ".git/")
}

// cacheBusters are query parameters whose short values are routinely random.
var cacheBusters = map[string]bool{
	"v": true, "_": true, "t": true, "ts": true, "cb": true, "r": true, "rand": true,
	"ver": true, "version": true, "rev": true, "hash": true, "cachebust": true,
	"cachebuster": true, "nocache": true,
}

// signing are the parameters of a presigned URL (AWS SigV4, Google Cloud Storage V4,
// CloudFront, Azure SAS) that carry signatures, credentials or policies; they are digests
// when the query also has the signature and the expiry of the same scheme.
var signing = map[string]bool{
	"X-Amz-Signature": true, "X-Amz-Credential": true, "X-Amz-Security-Token": true,
	"X-Goog-Signature": true, "X-Goog-Credential": true,
	"Signature": true, "Policy": true, "Key-Pair-Id": true,
	"sig": true,
}

// presigned reports whether a raw query is that of a presigned URL.
func presigned(query string) bool {
	has := func(name string) bool {
		return strings.HasPrefix(query, name+"=") || strings.Contains(query, "&"+name+"=")
	}
	return has("X-Amz-Signature") && has("X-Amz-Expires") ||
		has("X-Goog-Signature") && has("X-Goog-Expires") ||
		has("Signature") && has("Expires") ||
		has("sig") && has("se")
}

// scanURL adds the blobs of an escaped path and a raw query.
func scanURL(path, query string, bs *blobs) {
	o := scanOpts{noHex: isGit(path)}
	seg := 0
	for rest := path; rest != ""; {
		var s string
		s, rest, _ = strings.Cut(rest, "/")
		if s == "" {
			continue
		}
		seg++
		if len(s) >= minBlob {
			scanField(s, place{part: partPath, index: seg}, o, bs)
		}
	}
	if len(query) < minBlob {
		return
	}
	signed := presigned(query)
	for rest := query; rest != ""; {
		var kv string
		kv, rest, _ = strings.Cut(rest, "&")
		k, v, _ := strings.Cut(kv, "=")
		if len(k) >= minBlob {
			scanField(k, place{part: partQueryName}, o, bs)
		}
		if len(v) < minBlob || cacheBusters[k] && len(v) <= maxCacheBuster {
			continue
		}
		vo := o
		vo.signed = signed && signing[k]
		scanField(v, place{part: partQueryValue, name: shownName(k, maxShownName)}, vo, bs)
	}
}

// longValue is the longest query or header value over its limit.
type longValue struct {
	n  int
	at place
}

func (l longValue) reason() string {
	n := size(int64(l.n))
	switch {
	case l.at.part == partHeader && l.at.name != "":
		return fmt.Sprintf("a %s value in header %q", n, l.at.name)
	case l.at.part == partHeader:
		return fmt.Sprintf("a %s header value", n)
	case l.at.name != "":
		return fmt.Sprintf("a %s value for query parameter %q", n, l.at.name)
	}
	return fmt.Sprintf("a %s query parameter value", n)
}

// maxShownHeader is the longest header name a reason repeats.
const maxShownHeader = 40

// longest returns the longest query value over longQueryValue bytes or header value over
// longHeaderValue, if any.
func longest(query string, h http.Header) longValue {
	var l longValue
	if len(query) > longQueryValue {
		for rest := query; rest != ""; {
			var kv string
			kv, rest, _ = strings.Cut(rest, "&")
			k, v, _ := strings.Cut(kv, "=")
			if len(v) > longQueryValue && len(v) > l.n {
				l = longValue{n: len(v), at: place{part: partQueryValue, name: shownName(k, maxShownName)}}
			}
		}
	}
	for name, vs := range h {
		switch name {
		case "Cookie", "Authorization", "Proxy-Authorization":
			continue
		}
		for _, v := range vs {
			if len(v) > longHeaderValue && len(v) > l.n {
				l = longValue{n: len(v), at: place{part: partHeader, name: shownName(name, maxShownHeader)}}
			}
		}
	}
	return l
}

// randomLabel reports whether a subdomain looks like encoded data: at least 16 characters
// of letters and digits (dots and hyphens aside) with both, entropy of at least 3.5 bits a
// character, and letters less than 30% vowels.
func randomLabel(s string) bool {
	var counts [66]uint32
	m, letters, digits, vow := 0, 0, 0, 0
	for i := 0; i < len(s) && m < maxStats; i++ {
		c := s[i]
		switch classOf[c] {
		case clUpper, clLower:
			letters++
			vow += isVowel(c | 0x20)
		case clDigit:
			digits++
		default:
			continue
		}
		counts[symOf[c|0x20]]++
		m++
	}
	return m >= 16 && letters > 0 && digits > 0 && entropy(counts[:], m) >= hexEntropy &&
		float64(vow) < wordVowels*float64(letters)
}

// size formats a byte count for a reason.
func size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d-byte", n)
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// ordinal formats 21 as "21st".
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
