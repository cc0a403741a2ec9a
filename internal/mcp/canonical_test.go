package mcp

import (
	"errors"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name, in, want string
		inexact        bool
	}{
		{name: "white space", in: " { \"a\" :\t[ 1 , 2 ]\n} ", want: `{"a":[1,2]}`},
		{name: "member order", in: `{"b":1,"a":2,"c":{"z":1,"y":2}}`, want: `{"a":2,"b":1,"c":{"y":2,"z":1}}`},
		// In UTF-8 bytes U+FB33 sorts before U+1F600; in UTF-16 units the surrogate 0xD83D is less.
		{name: "keys by UTF-16 code units", in: `{"\ufb33":1,"😀":2,"€":3,"ö":4,"1":6,"a":7}`,
			want: "{\"1\":6,\"a\":7,\"ö\":4,\"€\":3,\"😀\":2,\"\ufb33\":1}"},
		{name: "a key that is a prefix of another", in: `{"ab":1,"a":2}`, want: `{"a":2,"ab":1}`},
		{name: "escapes decoded", in: `"\u0041\/\u00e9\ud83d\ude00"`, want: `"A/é😀"`},
		{name: "the escapes JSON needs", in: `"\"\\\b\f\n\r\t\u0001\u001f"`, want: `"\"\\\b\f\n\r\t\u0001\u001f"`},
		{name: "no escape for DEL or the separators", in: `"\u007f\u2028\u2029"`, want: "\"\x7f\u2028\u2029\""},
		{name: "literals", in: `[true,false,null]`, want: `[true,false,null]`},
		{name: "an integer", in: `100`, want: `100`},
		{name: "an exponent", in: `1E2`, want: `100`},
		{name: "a fraction of zero", in: `1.0`, want: `1`},
		{name: "minus zero", in: `-0.0`, want: `0`},
		{name: "1e21", in: `1e21`, want: `1e+21`},
		{name: "under 1e21", in: `999999999999999900000`, want: `999999999999999900000`},
		{name: "1e-7", in: `0.0000001`, want: `1e-7`},
		{name: "1e-6", in: `1e-6`, want: `0.000001`},
		{name: "the smallest float", in: `5e-324`, want: `5e-324`},
		{name: "the largest float", in: `1.7976931348623157e308`, want: `1.7976931348623157e+308`},
		{name: "shortest digits", in: `0.30000000000000004`, want: `0.30000000000000004`},
		{name: "a negative fraction", in: `-1.25e-3`, want: `-0.00125`},
		{name: "2^53 + 1, rounded", in: `9007199254740993`, want: `9007199254740992`, inexact: true},
		{name: "too many digits, rounded", in: `333333333.33333329`, want: `333333333.3333333`, inexact: true},
		{name: "2^53 is exact", in: `9007199254740992`, want: `9007199254740992`},
		{name: "trailing zeros are exact", in: `1.50000000000000000000000`, want: `1.5`},
		{name: "empty containers", in: `{"a":{},"b":[]}`, want: `{"a":{},"b":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, inexact, err := Canonical([]byte(tt.in))
			if err != nil || string(got) != tt.want || inexact != tt.inexact {
				t.Fatalf("Canonical(%s) = %s, %v, %v; want %s, %v", tt.in, got, inexact, err, tt.want, tt.inexact)
			}
			again, _, err := Canonical(got)
			if err != nil || string(again) != string(got) {
				t.Errorf("Canonical of the canonical form = %s, %v", again, err)
			}
		})
	}
}

func TestCanonicalRefuses(t *testing.T) {
	tests := []struct {
		name, in  string
		ambiguous bool
		want      string
	}{
		{name: "a duplicate", in: `{"a":1,"a":2}`, ambiguous: true, want: "appears twice"},
		{name: "a duplicate once escaped", in: `{"a":1,"\u0061":2}`, ambiguous: true, want: "appears twice"},
		{name: "keys by case", in: `{"a":1,"A":2}`, ambiguous: true, want: "differ only by case"},
		{name: "a key with a NUL", in: `{"a\u0000":1}`, ambiguous: true, want: "control or invisible"},
		{name: "a key with a C1 control", in: `{"\u0080":1}`, ambiguous: true, want: "control or invisible"},
		{name: "trailing data", in: `{} {}`, want: "data after"},
		{name: "invalid", in: `{"a":}`, want: "invalid JSON"},
		{name: "empty", in: ``, want: "invalid JSON"},
		{name: "too deep", in: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), want: "deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Canonical([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrAmbiguous) != tt.ambiguous {
				t.Fatalf("Canonical(%s) = %s, %v; want an error with %q, ambiguous %v", tt.in, got, err, tt.want, tt.ambiguous)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	fp := func(container, endpoint, body string) string {
		t.Helper()
		b := Parse([]byte(body))
		if b.Ambiguous() || len(b.Messages) != 1 {
			t.Fatalf("%s: findings %+v", body, b.Findings)
		}
		return b.Messages[0].Call(container, endpoint).Fingerprint()
	}
	base := fp("agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1}}}`)
	same := []struct{ name, body string }{
		{"another id", `{"jsonrpc":"2.0","id":"retry-7","method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1}}}`},
		{"re-spaced", "{ \"jsonrpc\" : \"2.0\", \"id\" : 1, \"method\" : \"tools/call\",\n \"params\" : { \"name\" : \"create_issue\", \"arguments\" : { \"repo\" : \"o/r\" , \"title\" : \"Bug\", \"labels\" : [ \"a\" , \"b\" ] , \"n\" : 1 } } }"},
		{"keys reordered", `{"params":{"arguments":{"n":1,"labels":["a","b"],"title":"Bug","repo":"o/r"},"name":"create_issue"},"method":"tools/call","id":1,"jsonrpc":"2.0"}`},
		{"escapes and number spelling", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create\u005fissue","arguments":{"repo":"o\/r","title":"B\u0075g","labels":["a","b"],"n":1.0e0}}}`},
		{"a progress token and trace fields", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":9,"traceparent":"00-ab-cd-01"},"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1}}}`},
	}
	for _, tt := range same {
		if got := fp("agent", "github", tt.body); got != base {
			t.Errorf("%s: fingerprint %s, want the same as the call's %s", tt.name, got, base)
		}
	}
	other := []struct{ name, container, endpoint, body string }{
		{"one value changed", "agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug!","labels":["a","b"],"n":1}}}`},
		{"a number changed", "agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":2}}}`},
		{"a number made a string", "agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":"1"}}}`},
		{"array order changed", "agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["b","a"],"n":1}}}`},
		{"an argument added", "agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1,"x":null}}}`},
		{"another tool", "agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1}}}`},
		{"another param", "agent", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","task":{},"arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1}}}`},
		{"another container", "other", "github", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1}}}`},
		{"another endpoint", "agent", "gitlab", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"o/r","title":"Bug","labels":["a","b"],"n":1}}}`},
	}
	seen := map[string]string{base: "the call"}
	for _, tt := range other {
		got := fp(tt.container, tt.endpoint, tt.body)
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: the same fingerprint as %s", tt.name, prev)
		}
		seen[got] = tt.name
	}
	// Absent and empty parts differ.
	noArgs := fp("agent", "e", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}}`)
	emptyArgs := fp("agent", "e", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{}}}`)
	if noArgs == emptyArgs {
		t.Error("no arguments and empty arguments have one fingerprint")
	}
	if c := (Call{Container: "a", Endpoint: "b"}); c.Fingerprint() == (Call{Container: "ab"}).Fingerprint() {
		t.Error("the parts run into each other")
	}
	// The encoding is fixed: a change of it must change CallPrefix.
	if want := "mcp1:057d3bc11abb8a57c84d0f0eb9a85830b40f0442a2a16344f1d1eb3a4456a599"; base != want {
		t.Errorf("fingerprint %s, want %s: a new encoding needs a new CallPrefix", base, want)
	}
}
