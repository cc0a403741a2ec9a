package mcp

import (
	"net/http"
	"strings"
	"testing"
)

func TestDecodeHeader(t *testing.T) {
	tests := []struct {
		name, in, want, err string
	}{
		{name: "plain", in: "tools/call", want: "tools/call"},
		{name: "plain with a space inside", in: "my tool", want: "my tool"},
		{name: "plain UTF-8 as a client sends it raw", in: "café", want: "café"},
		{name: "base64 of ASCII", in: "=?base64?cmVhZA==?=", want: "read"},
		{name: "base64 of UTF-8", in: "=?base64?SGVsbG8sIOS4lueVjA==?=", want: "Hello, 世界"},
		{name: "base64 of leading space", in: "=?base64?IHBhZGRlZCA=?=", want: " padded "},
		{name: "base64 of the sentinel itself", in: "=?base64?PT9iYXNlNjQ/eD89?=", want: "=?base64?x?="},
		{name: "base64 of the empty string", in: "=?base64??=", want: ""},
		{name: "a prefix without the suffix is plain", in: "=?base64?cmVhZA==", want: "=?base64?cmVhZA=="},
		{name: "the prefix in capitals is plain", in: "=?BASE64?cmVhZA==?=", want: "=?BASE64?cmVhZA==?="},
		{name: "bad base64", in: "=?base64?%%%?=", err: "not canonical base64"},
		{name: "base64 without padding", in: "=?base64?cmVhZA?=", err: "not canonical base64"},
		{name: "base64 with stray bits", in: "=?base64?cmVhZB==?=", err: "not canonical base64"},
		{name: "base64 with white space", in: "=?base64?cmVh ZA==?=", err: "not canonical base64"},
		{name: "base64 of bytes that are not UTF-8", in: "=?base64?//4=?=", err: "not UTF-8"},
		{name: "a plain value that is not UTF-8", in: "re\xffad", err: "not UTF-8"},
		{name: "a control character", in: "read\x00", err: "a control character"},
		{name: "DEL", in: "read\x7f", err: "a control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeHeader(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("DecodeHeader(%q) = %q, %v; want an error with %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("DecodeHeader(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestCheckHeaders(t *testing.T) {
	readBody := call(`{"name":"read"}`)
	deleteBody := call(`{"name":"delete","arguments":{"path":"/"}}`)
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete"}}]`
	tests := []struct {
		name   string
		header http.Header
		body   string
		msg    int    // the message the finding names
		want   string // a part of the finding; "" for none
	}{
		{name: "no headers", header: http.Header{}, body: deleteBody},
		{name: "both matching", header: http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"read"}}, body: readBody},
		{name: "Mcp-Method alone matching", header: http.Header{"Mcp-Method": {"tools/call"}}, body: readBody},
		{name: "a name in base64", header: http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"=?base64?cmVhZA==?="}}, body: readBody},
		{name: "a name of another script in base64", header: http.Header{"Mcp-Name": {"=?base64?Y2Fmw6k=?="}}, body: call(`{"name":"caf\u00e9"}`)},
		{name: "a resource's uri", header: http.Header{"Mcp-Method": {"resources/read"}, "Mcp-Name": {"file:///a"}}, body: `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}`},
		{name: "a header name in lower case, as HTTP/2 writes it", header: http.Header{"mcp-name": {"read"}}, body: readBody},

		{name: "Mcp-Name: read with a body calling delete", header: http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"read"}}, body: deleteBody, msg: 0,
			want: `Mcp-Name says "read" and the body's tools/call names "delete"`},
		{name: "read in base64 with a body calling delete", header: http.Header{"Mcp-Name": {"=?base64?cmVhZA==?="}}, body: deleteBody, msg: 0,
			want: `Mcp-Name says "read"`},
		{name: "a lower-case header name calling delete", header: http.Header{"mcp-name": {"read"}}, body: deleteBody, msg: 0, want: `Mcp-Name says "read"`},
		{name: "Mcp-Method: tools/list with a body calling", header: http.Header{"Mcp-Method": {"tools/list"}}, body: deleteBody, msg: 0,
			want: `Mcp-Method says "tools/list" and the body's method is "tools/call"`},
		{name: "Mcp-Name on a method that names nothing", header: http.Header{"Mcp-Method": {"tools/list"}, "Mcp-Name": {"read"}},
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, msg: 0, want: `Mcp-Name says "read" and the body's "tools/list" names nothing`},
		{name: "a batch [read, delete] with Mcp-Name: read", header: http.Header{"Mcp-Name": {"read"}}, body: batch, msg: 1, want: `names "delete"`},
		{name: "Mcp-Name twice", header: http.Header{"Mcp-Name": {"read", "delete"}}, body: readBody, msg: -1, want: `Mcp-Name appears 2 times`},
		{name: "Mcp-Name under two spellings", header: http.Header{"Mcp-Name": {"read"}, "mcp-name": {"read"}}, body: readBody, msg: -1, want: `appears 2 times`},
		{name: "bad base64", header: http.Header{"Mcp-Name": {"=?base64?cmVhZB==?="}}, body: readBody, msg: -1, want: `not canonical base64`},
		{name: "a sentinel-shaped name sent plain", header: http.Header{"Mcp-Name": {"=?base64?x?="}}, body: call(`{"name":"=?base64?x?="}`), msg: -1, want: `not canonical base64`},
		{name: "the name with a case change", header: http.Header{"Mcp-Name": {"Read"}}, body: readBody, msg: 0, want: `names "read"`},
		{name: "headers on a body of responses", header: http.Header{"Mcp-Method": {"tools/call"}}, body: `{"jsonrpc":"2.0","id":1,"result":{}}`, msg: -1, want: `carries no method`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Parse([]byte(tt.body))
			if b.Ambiguous() {
				t.Fatalf("the body has findings %+v", b.Findings)
			}
			got := CheckHeaders(tt.header, b)
			if tt.want == "" {
				if len(got) > 0 {
					t.Fatalf("findings %+v, want none", got)
				}
				return
			}
			found := false
			for _, f := range got {
				if !f.Refuse {
					t.Errorf("finding %+v does not refuse", f)
				}
				if f.Message == tt.msg && strings.Contains(f.Text, tt.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("findings %+v, want one of message %d with %q", got, tt.msg, tt.want)
			}
		})
	}
}
