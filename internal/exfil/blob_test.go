package exfil

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randBytes returns n bytes that are the same in every run.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6578666c))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func b64(seed uint64, chars int) string {
	return base64.RawStdEncoding.EncodeToString(randBytes(seed, chars))[:chars]
}

func b64url(seed uint64, chars int) string {
	return base64.RawURLEncoding.EncodeToString(randBytes(seed, chars))[:chars]
}

func hexOf(seed uint64, chars int) string {
	return hex.EncodeToString(randBytes(seed, chars))[:chars]
}

func TestBlobs(t *testing.T) {
	type want struct {
		kind   kind
		n      int
		digest bool
	}
	none := want{}
	cases := []struct {
		name string
		in   string
		want want
	}{
		// What is data.
		{"base64 32", b64(1, 32), want{kindBase64, 32, false}},
		{"base64 200", b64(2, 200), want{kindBase64, 200, false}},
		{"base64url 100", b64url(3, 100), want{kindBase64, 100, false}},
		{"base64 padded", base64.StdEncoding.EncodeToString(randBytes(4, 40)), want{kindBase64, 56, false}},
		{"base64 of text", base64.StdEncoding.EncodeToString([]byte("AWS_SECRET_ACCESS_KEY=abc and the rest of .env")), want{kindBase64, 64, false}},
		{"escaped base64", strings.NewReplacer("+", "%2B", "/", "%2F").Replace(b64(5, 120)), want{kindBase64, 120, false}},
		{"escaped padding", "ab" + b64(6, 60) + "%3D%3D", want{kindBase64, 64, false}},
		{"hex 50", hexOf(7, 50), want{kindHex, 50, false}},
		{"hex upper 48", strings.ToUpper(hexOf(8, 48)), want{kindHex, 48, false}},
		{"base32 64", strings.ToLower(base32.StdEncoding.EncodeToString(randBytes(9, 40))), want{kindBase32, 64, false}},
		{"in json", `{"data":"` + b64(10, 80) + `","n":1}`, want{kindBase64, 80, false}},
		{"in a form", "a=1&payload=" + b64(11, 90) + "&b=2", want{kindBase64, 90, false}},
		{"around a uuid", b64(12, 40) + "-123e4567-e89b-12d3-a456-426614174000-" + b64(13, 50), want{kindBase64, 51, false}},

		// Digests: blobs, weighed lower.
		{"md5", hexOf(20, 32), want{kindHex, 32, true}},
		{"sha1", hexOf(21, 40), want{kindHex, 40, true}},
		{"sha256", hexOf(22, 64), want{kindHex, 64, true}},
		{"sha512", hexOf(23, 128), want{kindHex, 128, true}},
		{"integrity", "sha512-" + base64.StdEncoding.EncodeToString(randBytes(24, 64)), want{kindBase64, 95, true}},

		// What is not.
		{"short", b64(30, 31), none},
		{"uuid", "123e4567-e89b-12d3-a456-426614174000", none},
		{"uuids", "123e4567-e89b-12d3-a456-426614174000,00000000-0000-4000-8000-000000000000", none},
		{"jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + b64url(31, 60) + "." + b64url(32, 43), none},
		{"jwt in json", `{"token":"eyJhbGciOiJFUzI1NiJ9.` + b64url(33, 120) + `.` + b64url(34, 86) + `"}`, none},
		{"camel case", "getUserProfileSettingsForAccount2", none},
		{"test name", "TestScoreReasonsNeverQuoteTheBlob", none},
		{"slug", "2024-01-15-my-long-descriptive-article-title", none},
		{"slug without digits", "my-long-descriptive-article-title-for-seo-purposes", none},
		{"one word", "thisisaverylongwordwithoutanyseparatorsatall", none},
		{"constant", "ERR_INVALID_ARG_TYPE_1234_ERR_INVALID_ARG_VALUE", none},
		{"k8s path", "k8s-io-api-core-v1-PodSpec-containers-0-image", none},
		{"file path", "src/internal/exfil/blob_test.go", none},
		{"digits", "1234567890123456789012345678901234567890", none},
		{"repeated", strings.Repeat("ab12", 20), none},
		{"text", "The quick brown fox jumps over the lazy dog, 42 times in 2024.", none},
		{"equals inside", "abcdefghij0123=klmnopqrstu4567=vwxyz", none},
		{"binary", string(randBytes(40, 4096)), none},
		{"percent", strings.Repeat("%41", 40), none},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var bs blobs
			scanField(c.in, place{part: partBody}, scanOpts{}, &bs)
			var got want
			switch {
			case bs.n > 0:
				got = want{bs.top.kind, bs.top.n, false}
			case bs.nDig > 0:
				got = want{bs.digest.kind, bs.digest.n, bs.digest.digest == hashDigest}
			}
			if got != c.want {
				t.Errorf("got %+v, want %+v (blobs %+v)", got, c.want, bs)
			}
			// The []byte path and the byte-by-byte search agree.
			var bb, br blobs
			scanField([]byte(c.in), place{part: partBody}, scanOpts{}, &bb)
			scanRuns(c.in, 0, len(c.in), place{part: partBody}, scanOpts{}, &br)
			if bb != bs || br != bs {
				t.Errorf("[]byte scan %+v, byte by byte %+v, string scan %+v", bb, br, bs)
			}
		})
	}
}

// TestBlobRecall holds the thresholds to random data: nearly every random value of 48
// characters or more is a blob, of the right kind. Base32 carries less than base64 in as many
// characters, and its letters are more often vowels, so more of its short values read as words.
func TestBlobRecall(t *testing.T) {
	b32 := base32.HexEncoding.WithPadding(base32.NoPadding)
	encs := []struct {
		kind   kind
		enc    func([]byte) string
		miss48 int // of 1000 values of 48 characters; of 100 characters, at most 5
	}{
		{kindBase64, base64.RawStdEncoding.EncodeToString, 10},
		{kindBase64, base64.RawURLEncoding.EncodeToString, 10},
		{kindBase32, func(b []byte) string { return strings.ToLower(b32.EncodeToString(b)) }, 100},
		{kindHex, hex.EncodeToString, 20},
	}
	for _, e := range encs {
		for _, n := range []int{48, 100} {
			t.Run(fmt.Sprintf("%v/%d", e.kind, n), func(t *testing.T) {
				missed := 0
				for seed := range uint64(1000) {
					s := e.enc(randBytes(seed, n))[:n]
					var bs blobs
					scanField(s, place{part: partBody}, scanOpts{}, &bs)
					if bs.n != 1 || bs.top.kind != e.kind || bs.top.n != n {
						missed++
					}
				}
				limit := 5
				if n == 48 {
					limit = e.miss48
				}
				if missed > limit {
					t.Errorf("%d of 1000 random values missed, want at most %d", missed, limit)
				}
			})
		}
	}
}

func TestShownName(t *testing.T) {
	for in, want := range map[string]string{
		"q":                     "q",
		"page[size]":            "page[size]",
		"a.b-c_d":               "a.b-c_d",
		"exactly-twenty-chars":  "exactly-twenty-chars",
		"twenty-one-characters": "",
		"":                      "",
		"a%20b":                 "",
		"with space":            "",
		"a+b":                   "",
		"a/b":                   "",
		"a=b":                   "",
		"\"quoted\"":            "",
		"new\nline":             "",
		"\u00e9t\u00e9":         "",
		"\xff":                  "",
	} {
		if got := shownName(in, maxShownName); got != want {
			t.Errorf("shownName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEntropy(t *testing.T) {
	cases := []struct {
		name   string
		counts []uint32
		m      int
		want   float64
	}{
		{"empty", make([]uint32, 66), 0, 0},
		{"one symbol", append([]uint32{8}, make([]uint32, 65)...), 8, 0},
		{"two even", append([]uint32{4, 4}, make([]uint32, 64)...), 8, 1},
		{"four even", append([]uint32{2, 2, 2, 2}, make([]uint32, 62)...), 8, 2},
		{"sixty-four once", append(ones(64), 0, 0), 64, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := entropy(c.counts, c.m); got < c.want-1e-9 || got > c.want+1e-9 {
				t.Errorf("entropy = %v, want %v", got, c.want)
			}
		})
	}
}

func ones(n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
