package exfil

import (
	"fmt"
	"math"

	"github.com/lockhttp/lockhttp/internal/percent"
)

// A blob is a run of at least minBlob characters from the base64, base64url, base32 or hex
// alphabets that looks random rather than like words: it has a digit, its Shannon entropy is
// at least base64Entropy (hexEntropy for hex), and its letters are less than wordVowels
// vowels unless its entropy is beyond what words reach. The run's characters are counted
// after the three escapes that base64 picks up in a URL (%2B, %2F, %3D) are read as '+', '/'
// and '='; '=' belongs to a run only as trailing padding, elsewhere it separates.
//
// What is routinely random and harmless is not a blob: a UUID (8-4-4-4-12 hex), a JWT (the
// secrets package judges those), the hex of a git smart-HTTP request, a short cache-busting
// value. Digests are blobs weighed at digestFactor: hex of exactly 32, 40, 64 or 128 characters
// (MD5, SHA-1, SHA-256, SHA-512; git object ids), an integrity value ("sha512-…") and the
// signatures, credentials and policies of a presigned URL (X-Amz-Signature, Signature, sig, …).
const (
	minBlob = 32
	// base64Entropy is the least Shannon entropy, in bits per character, of a base64 or
	// base32 blob. Random base64 of 32 characters has at least about 4.2; identifiers and
	// slugs have about 3.8 to 4.2, and are mostly told apart by their vowels.
	base64Entropy = 4.0
	// hexEntropy is the least entropy of a hex blob; random hex of 32 characters has about
	// 3.6 (at most 4).
	hexEntropy = 3.5
	// wordVowels: a run whose letters are at least 30% vowels reads as words (identifiers,
	// slugs: English has about 38%, random base64 about 19%), unless its entropy reaches
	// what words do not: mixedWordEntropy with both letter cases (camel case stays below
	// about 4.5; random base64 of 48 characters is above 4.6), singleWordEntropy with one
	// (lowercase words, digits and hyphens stay below about 4.2).
	wordVowels        = 0.30
	mixedWordEntropy  = 4.6
	singleWordEntropy = 4.4
	// maxStats bounds the characters of one run that are counted for its entropy, vowels and
	// letter kinds.
	maxStats = 4096
	// maxBodyScan bounds the bytes of a body that are searched for blobs; what lies beyond
	// is left to the byte tallies.
	maxBodyScan = 1 << 20
	// maxCacheBuster is the longest value of a cache-busting parameter that is ignored.
	maxCacheBuster = 40
)

// Character classes: those from clUpper on are the alphabet of a run.
const (
	clNone uint8 = iota
	clEsc        // '%': an escape, of interest when it is %2B, %2F or %3D
	clPad        // '='
	clUpper
	clLower
	clDigit
	clSym // + / - _
)

// classOf and symOf classify a byte and number it for the entropy count (0..65; '=' is
// padding and not counted).
var classOf, symOf = func() (cl, sym [256]uint8) {
	for c := 'A'; c <= 'Z'; c++ {
		cl[c], sym[c] = clUpper, uint8(c-'A')
	}
	for c := 'a'; c <= 'z'; c++ {
		cl[c], sym[c] = clLower, uint8(26+c-'a')
	}
	for c := '0'; c <= '9'; c++ {
		cl[c], sym[c] = clDigit, uint8(52+c-'0')
	}
	for i, c := range "+/-_" {
		cl[c], sym[c] = clSym, uint8(62+i)
	}
	cl['='] = clPad
	cl['%'] = clEsc
	return cl, sym
}()

// kind is the alphabet a blob is written in.
type kind uint8

const (
	kindBase64 kind = iota + 1 // both letter cases: 6 bits a character
	kindBase32                 // one letter case (base32, base36): 5 bits a character
	kindHex                    // 4 bits a character
)

func (k kind) String() string {
	switch k {
	case kindBase64:
		return "base64"
	case kindBase32:
		return "base32-style"
	case kindHex:
		return "hex"
	}
	return "encoded"
}

func (k kind) bits() float64 {
	switch k {
	case kindBase64:
		return 6
	case kindBase32:
		return 5
	}
	return 4
}

// part is where in a request a blob or a long value was found.
type part uint8

const (
	partPath part = iota + 1
	partQueryName
	partQueryValue
	partBody
	partHeader
)

// place says where a finding is, in words that quote no data: a parameter or header name
// is shown only when it is short and plain (see shownName).
type place struct {
	part  part
	index int    // path segment, from 1
	name  string // query parameter or header name; "" when not shown
}

func (p place) String() string {
	switch p.part {
	case partPath:
		return fmt.Sprintf("in path segment %d", p.index)
	case partQueryName:
		return "in a query parameter name"
	case partQueryValue:
		if p.name != "" {
			return fmt.Sprintf("in the value of query parameter %q", p.name)
		}
		return "in a query parameter value"
	case partBody:
		return "in the body"
	case partHeader:
		if p.name != "" {
			return fmt.Sprintf("in header %q", p.name)
		}
		return "in a header"
	}
	return "in the request"
}

// maxShownName is the longest parameter name a reason repeats; a longer one, or one with
// other bytes than [A-Za-z0-9._-[]], is not shown.
const maxShownName = 20

func shownName(s string, max int) string {
	if len(s) == 0 || len(s) > max {
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if classOf[c] < clUpper && c != '.' && c != '[' && c != ']' || c == '+' || c == '/' {
			return ""
		}
	}
	return s
}

// blob is one blob found.
type blob struct {
	kind   kind
	n      int // characters
	digest digest
	at     place
}

// digest says whether a blob is a digest, and which kind: what is weighed at digestFactor.
type digest uint8

const (
	notDigest    digest = iota
	hashDigest          // hex of a hash's length, an integrity value
	signedDigest        // a presigned URL's signature, credential or policy
)

func (b blob) bits() float64 { return float64(b.n) * b.kind.bits() }

// blobs sums up the blobs found in one request.
type blobs struct {
	n      int     // data blobs (not digests)
	chars  int     // their characters
	bits   float64 // their estimated content
	top    blob    // the longest data blob
	digest blob    // the longest digest
	nDig   int     // digests
}

func (bs *blobs) add(b blob) {
	if b.digest != notDigest {
		bs.nDig++
		if b.n > bs.digest.n {
			bs.digest = b
		}
		return
	}
	bs.n++
	bs.chars += b.n
	bs.bits += b.bits()
	if b.n > bs.top.n {
		bs.top = b
	}
}

// blobPoints is blobBase for 192 bits (32 characters of base64), one point more for each
// doubling, at most blobMax.
func blobPoints(bits float64) float64 {
	return math.Min(blobMax, math.Max(0, blobBase+math.Log2(bits/192)))
}

// points is what the blobs score before the host factors: the data blobs by their estimated
// content in all, or else the longest digest at digestFactor.
func (bs *blobs) points() float64 {
	if bs.n > 0 {
		return blobPoints(bs.bits)
	}
	if bs.nDig > 0 {
		return digestFactor * blobPoints(bs.digest.bits())
	}
	return 0
}

// reason describes the blobs; it names kinds, sizes and places, never content.
func (bs *blobs) reason() string {
	if bs.n == 0 {
		d := bs.digest
		what := "digest"
		if d.digest == signedDigest {
			what = "signature or token of a presigned URL"
		}
		s := fmt.Sprintf("a %d-character %s %s %s", d.n, d.kind, what, d.at)
		if bs.nDig > 1 {
			s += fmt.Sprintf(" and %d more", bs.nDig-1)
		}
		return s
	}
	t := bs.top
	s := fmt.Sprintf("a %d-character %s blob %s", t.n, t.kind, t.at)
	if bs.n > 1 {
		s += fmt.Sprintf(" and %d more (%d characters in all)", bs.n-1, bs.chars)
	}
	return s
}

// scanOpts says what to ignore in one field.
type scanOpts struct {
	noHex  bool // a git smart-HTTP request: hex is object ids
	signed bool // every blob in the field is a presigned URL's signature, credential or policy
}

// charAt reads the character at s[i]: its width in bytes (3 for an escape) and its class.
func charAt[T string | []byte](s T, i int) (int, uint8) {
	if c := classOf[s[i]]; c != clEsc {
		return 1, c
	}
	w, cl, _ := escapeAt(s, i)
	return w, cl
}

// escapeAt reads the escape at s[i]: %2B and %2F are symbols of base64, %3D its padding. It
// returns the escape's width, class and the byte it stands for.
func escapeAt[T string | []byte](s T, i int) (int, uint8, byte) {
	if c, ok := percent.Escape(s, i); ok {
		switch c {
		case '+', '/':
			return 3, clSym, c
		case '=':
			return 3, clPad, c
		}
	}
	return 1, clNone, s[i]
}

// hasPrefix reports whether s[i:] starts with p.
func hasPrefix[T string | []byte](s T, i int, p string) bool {
	if len(s)-i < len(p) {
		return false
	}
	for j := 0; j < len(p); j++ {
		if s[i+j] != p[j] {
			return false
		}
	}
	return true
}

// scanField adds the blobs of one field (a path segment, a query name or value, the body).
// A run long enough to judge covers one of every minBlob positions, so scanField looks at
// those only, and has scanRuns read the runs around the ones that may be in a run: on text,
// most bytes are never read.
func scanField[T string | []byte](s T, at place, o scanOpts, bs *blobs) {
	i := 0 // the bytes before i are done, and i is between runs
	for j := minBlob - 1; j < len(s); j = i + minBlob - 1 {
		if !mayRun[s[j]] {
			i = j + 1
			continue
		}
		q := j
		for q > i && mayRun[s[q-1]] {
			q--
		}
		i = scanRuns(s, q, j+1, at, o, bs)
	}
}

// mayRun says which bytes may be part of a run, or of a JWT that is skipped: any other byte
// is between runs.
var mayRun = func() (t [256]bool) {
	for c := range t {
		t[c] = classOf[c] != clNone || c == '.'
	}
	return t
}()

// scanRuns reads runs from s[i], which is between runs, and adds their blobs; it stops between
// runs at limit or after, and returns where. scanRuns(s, 0, len(s), …) is what scanField does,
// byte by byte.
func scanRuns[T string | []byte](s T, i, limit int, at place, o scanOpts, bs *blobs) int {
	for i < len(s) && i < limit {
		// Skip to a run. (charAt by hand: the compiler does not inline it.)
		cl := classOf[s[i]]
		if cl < clUpper {
			w := 1
			if cl == clEsc {
				w, cl, _ = escapeAt(s, i)
			}
			if cl < clUpper {
				i += w
				continue
			}
		}
		start, n := i, 0
		for i < len(s) {
			cl := classOf[s[i]]
			if cl >= clUpper {
				i++
				n++
				continue
			}
			if cl == clEsc {
				w, ecl, _ := escapeAt(s, i)
				if ecl >= clUpper {
					i += w
					n++
					continue
				}
				cl = ecl
			}
			if cl == clPad {
				i, n = padding(s, i, n)
			}
			break
		}
		if s[start] == 'e' && hasPrefix(s, start, "eyJ") && i < len(s) && s[i] == '.' {
			// A JWT or JWE: its segments and dots are the secrets package's to judge.
			for i < len(s) && (s[i] == '.' || classOf[s[i]] >= clUpper) {
				i++
			}
			continue
		}
		if n >= minBlob {
			candidates(s[start:i], n, at, o, bs)
		}
	}
	return i
}

// padding reads the '=' at s[i] that follows a run of n characters: if only '=' follow up
// to the run's end, they are its padding, and padding returns the end and the count with
// them; otherwise the '=' separates, and the run ends before it.
func padding[T string | []byte](s T, i, n int) (int, int) {
	j, m := i, 0
	for j < len(s) {
		w, cl := charAt(s, j)
		if cl != clPad {
			if cl >= clUpper {
				return i, n
			}
			break
		}
		j += w
		m++
	}
	return j, n + m
}

// candidates judges one run, without the UUIDs in it.
func candidates[T string | []byte](run T, n int, at place, o scanOpts, bs *blobs) {
	for {
		u := findUUID(run)
		if u < 0 {
			break
		}
		if u >= minBlob {
			judge(run[:u], at, o, bs)
		}
		run = run[u+36:]
	}
	if len(run) >= minBlob {
		judge(run, at, o, bs)
	}
}

// findUUID returns the offset of the first UUID (8-4-4-4-12 hex) in s, or -1.
func findUUID[T string | []byte](s T) int {
	for k := 8; k+28 <= len(s); k++ {
		if s[k] != '-' {
			continue
		}
		u := k - 8
		if isUUID(s[u : u+36]) {
			return u
		}
	}
	return -1
}

func isUUID[T string | []byte](s T) bool {
	for i := 0; i < 36; i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return false
			}
		} else if _, ok := percent.Hex(s[i]); !ok {
			return false
		}
	}
	return true
}

// judge classifies one run (escapes included) and adds it if it is a blob.
func judge[T string | []byte](run T, at place, o scanOpts, bs *blobs) {
	// A blob has a digit: hex without one has at most log2(6) bits a character, and base64
	// and base32 without one read as words. Most long runs that are not blobs have none.
	digit := false
	for i := 0; i < len(run) && !digit; i++ {
		digit = classOf[run[i]] == clDigit
	}
	if !digit {
		return
	}
	var (
		counts  [66]uint32 // by symOf, over the first maxStats characters
		byClass [clSym + 1]int
		flags   uint8
		m, n    int // characters counted for entropy; all characters
		vow     int
	)
	for i := 0; i < len(run); n++ {
		c, cl := run[i], classOf[run[i]]
		if cl == clEsc {
			var w int
			w, cl, c = escapeAt(run, i)
			i += w
		} else {
			i++
		}
		byClass[cl]++
		if cl == clPad || m == maxStats {
			continue
		}
		m++
		counts[symOf[c]]++
		f := charFlags[c]
		flags |= f
		vow += int(f & fVowel)
	}
	if n < minBlob {
		return
	}
	up, low, dig, sym := byClass[clUpper], byClass[clLower], byClass[clDigit], byClass[clSym]
	h := entropy(counts[:], m)
	b := blob{n: n, at: at}
	if o.signed {
		b.digest = signedDigest
	}
	switch {
	case flags&fNonHex == 0 && sym == 0 && byClass[clPad] == 0 && flags&(fHexLow|fHexUp) != fHexLow|fHexUp:
		if o.noHex || h < hexEntropy {
			return
		}
		b.kind = kindHex
		switch n {
		case 32, 40, 64, 128:
			b.digest = max(b.digest, hashDigest)
		}
	case dig > 0 && up+low > 0:
		wordEntropy := singleWordEntropy
		b.kind = kindBase32
		if up > 0 && low > 0 {
			b.kind, wordEntropy = kindBase64, mixedWordEntropy
		}
		if h < base64Entropy || h < wordEntropy && float64(vow) >= wordVowels*float64(up+low) {
			return
		}
		if hasPrefix(run, 0, "sha256-") || hasPrefix(run, 0, "sha384-") || hasPrefix(run, 0, "sha512-") {
			b.digest = max(b.digest, hashDigest) // a subresource or package integrity value
		}
	default:
		return
	}
	bs.add(b)
}

// Flags of a letter, in charFlags.
const (
	fVowel  = 1 << iota // a, e, i, o, u in either case (must be 1: judge adds it)
	fHexLow             // a-f
	fHexUp              // A-F
	fNonHex             // g-z, G-Z
)

var charFlags = func() (t [256]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		f := uint8(fNonHex)
		if c <= 'f' {
			f = fHexLow
		}
		if isVowel(byte(c)) == 1 {
			f |= fVowel
		}
		t[c], t[c-'a'+'A'] = f, f
		if c <= 'f' {
			t[c-'a'+'A'] = f&^fHexLow | fHexUp
		}
	}
	return t
}()

func isVowel(c byte) int {
	switch c {
	case 'a', 'e', 'i', 'o', 'u':
		return 1
	}
	return 0
}

// entropy is the Shannon entropy, in bits per character, of m characters with these counts.
func entropy(counts []uint32, m int) float64 {
	if m == 0 {
		return 0
	}
	var sum float64
	for _, c := range counts {
		if c < uint32(len(cLog2c)) {
			sum += cLog2c[c]
		} else {
			f := float64(c)
			sum += f * math.Log2(f)
		}
	}
	return math.Log2(float64(m)) - sum/float64(m)
}

// cLog2c[c] is c·log2(c), 0 for 0.
var cLog2c = func() (t [256]float64) {
	for c := 2; c < len(t); c++ {
		t[c] = float64(c) * math.Log2(float64(c))
	}
	return t
}()
