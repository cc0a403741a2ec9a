package secrets

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/jsonlex"
	"github.com/lockhttp/lockhttp/internal/percent"
)

// Request is what Scan looks at: one request as the gate would send it on.
type Request struct {
	Host  string // the host it goes to, read by floor.HostOf (a host the floor refuses matches no pattern but "*")
	Path  string // escaped path
	Query string // raw query
	// Header holds the end-to-end headers that go to the origin; the caller removes its own
	// Proxy-Authorization first.
	Header http.Header
	// Body is at most the limit the caller chose (a body cut at the limit is scanned as far as
	// it goes); nil: none. Scan neither keeps nor changes it.
	Body []byte
	// MediaType is the Content-Type media type, lower case, without parameters.
	MediaType string
}

const (
	// maxFindings bounds what Scan reports; beyond it Scan adds at most one more finding,
	// the first that may not go to the request's host, so that Egress stays exact.
	maxFindings = 64
	// maxBase64 bounds the base64 decoded per request (header values, multipart parts).
	maxBase64 = 64 << 10
	// maxParts bounds the multipart parts told apart; the rest is scanned as one.
	maxParts = 256
)

// Ranks order findings by the part of the request they were found in.
const (
	rankHost = iota
	rankPath
	rankQuery
	rankHeader
	rankBody
)

// found is a finding with what Scan needs to order and sanitise it.
type found struct {
	Finding
	value string
	rank  int
	sub   string // header name, for a stable order
}

// place says where hits were found; Where is built from it only for a hit.
type place struct {
	rank   int
	where  string // used as is when set
	prefix string // else prefix + the cleaned name + suffix
	name   string
	suffix string
	// shown caches prefix + cleaned name + suffix, built for shownSuffix.
	shown, shownSuffix string
}

// scan is the state of one Scan.
type scan struct {
	d     *Detector
	host  string
	found []found
	extra bool  // the one finding past maxFindings was added
	hits  []hit // scratch: hits of one decoded text
	buf   []byte
	work  int // bytes examined, for the fuzz test's bound
	b64   int // base64 bytes decoded
}

// Scan returns the credentials found in r, ordered by place (host, path, query, headers by
// name, body); each distinct value is reported once per place. The work is linear in the size
// of r: the body is scanned as given, so the caller bounds it.
func (d *Detector) Scan(r *Request) []Finding {
	if r == nil {
		return nil
	}
	s := scan{d: d, host: floor.HostOf(r.Host)}
	s.request(r)
	return s.result()
}

// Egress returns the first finding of Scan that may not go to r.Host (its Hosts do not match
// r.Host: exact, "*.suffix" not matching the bare suffix, "*"), or nil. The gate refuses such a
// request with E_SECRET_EGRESS.
func (d *Detector) Egress(r *Request) *Finding {
	fs := d.Scan(r)
	host := floor.HostOf(r.Host)
	for i := range fs {
		if !hostMatch(fs[i].Hosts, host) {
			return &fs[i]
		}
	}
	return nil
}

func (s *scan) request(r *Request) {
	s.text(r.Host, &place{rank: rankHost, where: "host"})
	s.decoded(r.Path, &place{rank: rankPath, where: "path"}, false, true)
	if r.Query != "" {
		s.params(r.Query, 0, s.findRaw(r.Query), "query ", rankQuery)
	}
	for name, vals := range r.Header {
		for _, v := range vals {
			s.header(name, v)
		}
	}
	s.body(r.Body, r.MediaType)
}

// find returns the hits in v, in a scratch slice valid until the next call.
func (s *scan) find(v string) []hit {
	f := s.d.newFinder(v, s.host, s.hits[:0], maxHits)
	s.hits = f.find()
	s.work += f.work
	return s.hits
}

// findRaw returns the hits in v in a slice of their own.
func (s *scan) findRaw(v string) []hit {
	f := s.d.newFinder(v, s.host, nil, maxHits)
	h := f.find()
	s.work += f.work
	return h
}

func (s *scan) text(v string, p *place) {
	if v == "" {
		return
	}
	for _, h := range s.find(v) {
		s.add(h, p)
	}
}

// decoded scans v (when raw is set) and v percent-decoded once and twice.
func (s *scan) decoded(v string, p *place, plus, raw bool) {
	if raw {
		s.text(v, p)
	}
	d1 := percent.Decode(v, plus)
	if d1 == v {
		return
	}
	s.work += len(v)
	s.text(d1, p)
	if d2 := percent.Decode(d1, plus); d2 != d1 {
		s.work += len(d1)
		s.text(d2, p)
	}
}

func (s *scan) add(h hit, p *place) {
	where := p.where
	if where == "" {
		if p.shown == "" || p.shownSuffix != p.suffix {
			p.shown, p.shownSuffix = p.prefix+s.clean(p.name)+p.suffix, p.suffix
		}
		where = p.shown
	}
	if h.nested {
		where += " (inside a jwt)"
	}
	for i := range s.found {
		f := &s.found[i]
		if f.Kind == h.kind && f.Where == where && f.value == h.value {
			return
		}
	}
	if len(s.found) >= maxFindings {
		if s.extra || hostMatch(h.hosts, s.host) {
			return
		}
		s.extra = true
	}
	v := strings.Clone(h.value)
	s.found = append(s.found, found{
		Finding: Finding{Kind: h.kind, Where: where, Hash: hash8(v), Hosts: slices.Clone(h.hosts)},
		value:   v,
		rank:    p.rank,
		sub:     p.name,
	})
}

// clean makes a name from the request (header, parameter, JSON key, part) fit to show: its
// credentials masked, cut to 64 bytes, quoted unless plain.
func (s *scan) clean(n string) string {
	n = s.d.MaskText(n)
	if len(n) > 64 {
		cut := 64
		for cut > 0 && !utf8.RuneStart(n[cut]) {
			cut--
		}
		n = n[:cut] + "…"
	}
	if !plainKey(n) {
		return strconv.Quote(n)
	}
	return n
}

// result sanitises and orders the findings: no Where or host shows any value found.
func (s *scan) result() []Finding {
	if len(s.found) == 0 {
		return nil
	}
	for i := range s.found {
		f := &s.found[i]
		for j := range s.found {
			v := s.found[j].value
			if strings.Contains(f.Where, v) {
				f.Where = strings.ReplaceAll(f.Where, v, Mask(string(s.found[j].Kind), v))
			}
			lv := strings.ToLower(v)
			f.Hosts = slices.DeleteFunc(f.Hosts, func(h string) bool { return strings.Contains(h, v) || strings.Contains(h, lv) })
		}
	}
	slices.SortStableFunc(s.found, func(a, b found) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		if a.rank == rankHeader {
			return strings.Compare(a.sub, b.sub)
		}
		return 0
	})
	out := make([]Finding, len(s.found))
	for i := range s.found {
		out[i] = s.found[i].Finding
	}
	return out
}

// params scans name=value pairs separated by '&' (a query or a form body), whose raw hits
// (offsets from base) are known, and each name and value percent-decoded.
func (s *scan) params(text string, base int, raw []hit, prefix string, rank int) {
	hi := 0
	for start := 0; start < len(text); {
		end := strings.IndexByte(text[start:], '&')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		name, val, _ := strings.Cut(text[start:end], "=")
		p := place{rank: rank, prefix: prefix, name: name}
		if strings.IndexByte(name, '%') >= 0 || strings.IndexByte(name, '+') >= 0 {
			p.name = percent.Decode(name, true)
			s.decoded(name, &p, true, false)
		}
		for hi < len(raw) && raw[hi].off-base < end {
			s.add(raw[hi], &p)
			hi++
		}
		s.decoded(val, &p, true, false)
		start = end + 1
	}
}

func isAuthorization(name string) bool {
	return strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "Proxy-Authorization")
}

// header scans one header value: as is, percent-decoded, Basic credentials decoded, and base64
// tokens that decode to text.
func (s *scan) header(name, v string) {
	s.text(name, &place{rank: rankHeader, prefix: "header ", name: name, suffix: " (name)"})
	p := place{rank: rankHeader, prefix: "header ", name: name}
	s.decoded(v, &p, false, true)
	if isAuthorization(name) {
		scheme, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
		if strings.EqualFold(scheme, "Basic") {
			s.basic(strings.TrimSpace(rest), p)
			return
		}
	}
	s.base64Tokens(v, p)
}

// basic scans the user and password of Basic credentials.
func (s *scan) basic(tok string, p place) {
	if s.b64+len(tok) > maxBase64 {
		return
	}
	s.b64 += len(tok)
	b, ok := decodeBase64(tok)
	if !ok {
		return
	}
	dec := string(b)
	user, _, _ := strings.Cut(dec, ":")
	for _, h := range s.find(dec) {
		q := p
		q.suffix = " (basic password)"
		if h.off < len(user) {
			q.suffix = " (basic user)"
		}
		s.add(h, &q)
	}
}

// base64Tokens decodes the tokens of a header value (separated by spaces, commas and
// semicolons; "name=" dropped) that are base64 of text, and scans the text.
func (s *scan) base64Tokens(v string, p place) {
	p.suffix = " (base64)"
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && v[j] != ' ' && v[j] != ',' && v[j] != ';' && v[j] != '\t' {
			j++
		}
		tok := v[i:j]
		i = j + 1
		if k := strings.IndexByte(tok, '='); k >= 0 && strings.TrimRight(tok[k:], "=") != "" {
			tok = tok[k+1:]
		}
		if len(tok) < 12 {
			continue
		}
		if s.b64+len(tok) > maxBase64 {
			return
		}
		s.b64 += len(tok)
		s.work += len(tok)
		if b, ok := decodeBase64(tok); ok && isText(b) {
			s.text(view(b), &p)
		}
	}
}

// mediaType reduces a Content-Type to its lower-case media type.
func mediaType(mt string) string {
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	return strings.ToLower(strings.TrimSpace(mt))
}

func isJSONType(mt string) bool {
	switch mt {
	case "application/json", "text/json", "application/x-ndjson", "application/ndjson",
		"application/jsonl", "application/x-jsonlines", "application/json-seq":
		return true
	}
	return strings.HasSuffix(mt, "+json")
}

// looksJSON reports whether text begins (after white space) as a JSON object or array.
func looksJSON(text string) bool {
	t := strings.TrimLeft(text[:min(len(text), 64)], " \t\r\n")
	return t != "" && (t[0] == '{' || t[0] == '[')
}

func (s *scan) body(b []byte, mt string) {
	if len(b) == 0 {
		return
	}
	text := view(b)
	mt = mediaType(mt)
	raw := s.findRaw(text)
	switch {
	case isJSONType(mt) || (mt == "" || mt == "text/plain") && looksJSON(text):
		s.json(text, 0, raw, "body")
	case mt == "application/x-www-form-urlencoded":
		s.params(text, 0, raw, "body (form) ", rankBody)
	case strings.HasPrefix(mt, "multipart/"):
		s.multipart(text, raw)
	default:
		p := place{rank: rankBody, where: "body"}
		for _, h := range raw {
			s.add(h, &p)
		}
	}
}

// json scans JSON text whose raw hits (offsets from base) are known: each hit is placed at the
// path of the string it is in, and strings with escapes are scanned unescaped (once and twice).
// Without hits or escapes there is nothing more to find, and the text is not walked.
func (s *scan) json(text string, base int, raw []hit, prefix string) {
	outside := place{rank: rankBody, where: prefix}
	if len(raw) == 0 && !s.mustUnescape(text) {
		return
	}
	var l jsonlex.Lexer
	b := bytesOf(text)
	l.Reset(b, jsonlex.Lenient, maxJSONDepth)
	hi := 0
	for {
		t := l.NextString()
		if t.Kind == jsonlex.End {
			break
		}
		start, end, esc, isKey := t.Start, t.End, t.Escaped, t.Kind == jsonlex.Key
		for hi < len(raw) && raw[hi].off-base < start {
			s.add(raw[hi], &outside)
			hi++
		}
		var p place
		at := func() *place {
			if p.where == "" {
				p = place{rank: rankBody, where: prefix + " (json)"}
				if path := jsonPath(&l, b, isKey, s.clean); path != "" {
					p.where += " " + path
				}
				if isKey {
					p.where += " (key)"
				}
			}
			return &p
		}
		lo := hi
		for hi < len(raw) && raw[hi].off-base < end {
			hi++
		}
		if !esc || lo == hi && !s.mustUnescape(text[start:end]) {
			for _, h := range raw[lo:hi] {
				s.add(h, at())
			}
			continue
		}
		// Escaped: the unescaped text is what the origin reads, and its values (a PEM block with
		// real line ends) are the ones to report; a raw hit stands only for a kind the unescaped
		// text does not show.
		var kinds []Kind
		s.buf = unescapeJSON(s.buf[:0], text[start:end])
		s.work += end - start
		u := view(s.buf)
		for _, h := range s.find(u) {
			kinds = append(kinds, h.kind)
			s.add(h, at())
		}
		if strings.IndexByte(u, '\\') >= 0 {
			u2 := string(unescapeJSON(nil, u))
			s.work += len(u)
			for _, h := range s.find(u2) {
				kinds = append(kinds, h.kind)
				s.add(h, at())
			}
		}
		for _, h := range raw[lo:hi] {
			if !slices.Contains(kinds, h.kind) {
				s.add(h, at())
			}
		}
	}
	for ; hi < len(raw); hi++ {
		s.add(raw[hi], &outside)
	}
}

// mustUnescape reports whether escaped JSON text may hide from the raw scan what its unescaped
// form shows: \u and \/ escapes do (they can stand inside a key), and any escape does when
// the detector's own patterns or values may hold escaped characters. The escapes of line
// ends, tabs and quotes stand between keys, where the raw scan sees them as separators.
func (s *scan) mustUnescape(text string) bool {
	for i := 0; ; i += 2 {
		j := strings.IndexByte(text[i:], '\\')
		if j < 0 || i+j+1 >= len(text) {
			return false
		}
		i += j
		if s.d.unescape || text[i+1] == 'u' || text[i+1] == '/' {
			return true
		}
	}
}

// multipart places the raw hits of a multipart body by part, walks JSON parts and decodes
// base64 parts (within the base64 budget).
func (s *scan) multipart(text string, raw []hit) {
	outside := place{rank: rankBody, where: "body (multipart)"}
	hi := 0
	defer func() {
		for ; hi < len(raw); hi++ {
			s.add(raw[hi], &outside)
		}
	}()
	first := 0
	if !strings.HasPrefix(text, "--") {
		first = strings.Index(text, "\n--") + 1
		if first == 0 {
			return
		}
	}
	eol := strings.IndexByte(text[first:], '\n')
	if eol < 0 {
		return
	}
	boundary := strings.TrimRight(text[first+2:first+eol], "\r \t")
	if boundary == "" || len(boundary) > 200 {
		return
	}
	delim := "\n--" + boundary
	pos := first + eol + 1
	for n := 1; n <= maxParts && pos < len(text); n++ {
		k := strings.Index(text[pos:], delim)
		end := len(text)
		if k >= 0 {
			end = pos + k
		}
		part := strings.TrimSuffix(text[pos:end], "\r")
		head, content, hl := "", part, 0
		if i := strings.Index(part, "\r\n\r\n"); i >= 0 {
			head, content, hl = part[:i], part[i+4:], i+4
		} else if i := strings.Index(part, "\n\n"); i >= 0 {
			head, content, hl = part[:i], part[i+2:], i+2
		}
		for hi < len(raw) && raw[hi].off < pos {
			s.add(raw[hi], &outside)
			hi++
		}
		p := place{rank: rankBody, prefix: "body (multipart) ", name: partHeader(head, "content-disposition", "name")}
		if p.name == "" {
			p = place{rank: rankBody, where: "body (multipart) part " + strconv.Itoa(n)}
		}
		// Hits in the part's headers, then in its content.
		for hi < len(raw) && raw[hi].off < pos+hl {
			s.add(raw[hi], &p)
			hi++
		}
		lo := hi
		for hi < len(raw) && raw[hi].off < end {
			hi++
		}
		ctype := mediaType(partHeader(head, "content-type", ""))
		switch {
		case isJSONType(ctype):
			where := p.where
			if where == "" {
				where = p.prefix + s.clean(p.name)
			}
			s.json(content, pos+hl, raw[lo:hi], where)
		default:
			for _, h := range raw[lo:hi] {
				s.add(h, &p)
			}
			if strings.EqualFold(strings.TrimSpace(partHeader(head, "content-transfer-encoding", "")), "base64") {
				s.base64Part(content, p)
			}
		}
		if k < 0 {
			break
		}
		pos = end + len(delim)
		if strings.HasPrefix(text[pos:], "--") {
			break
		}
		if i := strings.IndexByte(text[pos:], '\n'); i >= 0 {
			pos += i + 1
		} else {
			break
		}
	}
}

// base64Part decodes a base64 part (line breaks removed) within the budget and scans it when it
// is text.
func (s *scan) base64Part(content string, p place) {
	if s.b64+len(content) > maxBase64 {
		return
	}
	s.b64 += len(content)
	s.work += len(content)
	b := make([]byte, 0, len(content))
	for i := 0; i < len(content); i++ {
		if c := content[i]; c != '\r' && c != '\n' && c != ' ' && c != '\t' {
			b = append(b, c)
		}
	}
	if dec, ok := decodeBase64(view(b)); ok && isText(dec) {
		if p.where != "" {
			p.where += " (base64)"
		} else {
			p.suffix = " (base64)"
		}
		s.text(view(dec), &p)
	}
}

// partHeader returns a header of a multipart part's head; with param set, that parameter of it
// (name="…").
func partHeader(head, name, param string) string {
	for head != "" {
		line := head
		if i := strings.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = ""
		}
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), name) {
			continue
		}
		if param == "" {
			return strings.TrimSpace(v)
		}
		for _, f := range strings.Split(v, ";") {
			pk, pv, ok := strings.Cut(strings.TrimSpace(f), "=")
			if ok && strings.EqualFold(pk, param) {
				return strings.Trim(pv, `"`)
			}
		}
		return ""
	}
	return ""
}

// view returns b as a string without copying. A scan only reads it while it runs and clones
// every value it keeps (add), so nothing is retained or written through the string.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
