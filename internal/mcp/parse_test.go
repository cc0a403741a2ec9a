package mcp

import (
	"strings"
	"testing"
)

// call is a tools/call body with params written as given.
func call(params string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + params + `}`
}

// wantMsg is what a test expects of one parsed message.
type wantMsg struct {
	kind      Kind
	id        string
	method    string
	target    string
	arguments string
	rest      string
}

func TestParseReads(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		batch bool
		want  []wantMsg
	}{
		{name: "a call", body: call(`{"name":"read","arguments":{"path":"/a","n":2}}`),
			want: []wantMsg{{Request, "1", "tools/call", "read", `{"n":2,"path":"/a"}`, `{}`}}},
		{name: "a call re-spaced and reordered", body: " {\"params\" : {\"arguments\":{ \"n\" : 2.0 , \"path\":\"\\/a\"},\n\"name\":\"read\"},\"method\":\"tools/call\",\"id\":1,\"jsonrpc\":\"2.0\"}\n",
			want: []wantMsg{{Request, "1", "tools/call", "read", `{"n":2,"path":"/a"}`, `{}`}}},
		{name: "_meta left out, other params kept", body: call(`{"name":"read","_meta":{"progressToken":7},"task":{"ttl":5}}`),
			want: []wantMsg{{Request, "1", "tools/call", "read", ``, `{"task":{"ttl":5}}`}}},
		{name: "a string id as written", body: `{"jsonrpc":"2.0","id":"a\u0062","method":"tools/list"}`,
			want: []wantMsg{{Request, `"a\u0062"`, "tools/list", "", "", ""}}},
		{name: "a number id as written", body: `{"jsonrpc":"2.0","id":1.0e0,"method":"ping","params":{}}`,
			want: []wantMsg{{Request, `1.0e0`, "ping", "", "", `{}`}}},
		{name: "a notification", body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			want: []wantMsg{{Notification, "", "notifications/initialized", "", "", ""}}},
		{name: "the client's response to the server", body: `{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}`,
			want: []wantMsg{{Response, `"s-1"`, "", "", "", ""}}},
		{name: "an error response", body: `{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}`,
			want: []wantMsg{{Response, `3`, "", "", "", ""}}},
		{name: "a method with an escaped slash", body: `{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"read"}}`,
			want: []wantMsg{{Request, "1", "tools/call", "read", "", `{}`}}},
		{name: "a tool name escaped as a client that writes ASCII does", body: call(`{"name":"caf\u00e9"}`),
			want: []wantMsg{{Request, "1", "tools/call", "café", "", `{}`}}},
		{name: "argument keys with escapes", body: call(`{"name":"read","arguments":{"\u003cx\u003e":1,"caf\u00e9":"\u00e9"}}`),
			want: []wantMsg{{Request, "1", "tools/call", "read", `{"<x>":1,"café":"é"}`, `{}`}}},
		{name: "prompts/get names its prompt", body: `{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"greet","arguments":{"who":"x"}}}`,
			want: []wantMsg{{Request, "2", "prompts/get", "greet", `{"who":"x"}`, `{}`}}},
		{name: "resources/read names its URI", body: `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","name":"x"}}`,
			want: []wantMsg{{Request, "2", "resources/read", "file:///a", "", `{"name":"x"}`}}},
		{name: "a batch [allowed, denied]", batch: true,
			body: `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete","arguments":{}}}]`,
			want: []wantMsg{{Request, "1", "tools/call", "read", "", `{}`}, {Request, "2", "tools/call", "delete", `{}`, `{}`}}},
		{name: "a batch with a notification and a response", batch: true,
			body: `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}},{"jsonrpc":"2.0","id":9,"result":{}}]`,
			want: []wantMsg{{Notification, "", "notifications/cancelled", "", "", `{"requestId":1}`}, {Response, "9", "", "", "", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Parse([]byte(tt.body))
			if len(b.Findings) > 0 {
				t.Fatalf("findings %+v", b.Findings)
			}
			if b.Batch != tt.batch || len(b.Messages) != len(tt.want) {
				t.Fatalf("batch %v with %d messages, want %v with %d", b.Batch, len(b.Messages), tt.batch, len(tt.want))
			}
			for i, w := range tt.want {
				m := b.Messages[i]
				if m.Kind != w.kind || string(m.ID) != w.id || m.Method != w.method || m.Target != w.target || m.HasTarget != (w.target != "") ||
					string(m.Arguments) != w.arguments || string(m.Rest) != w.rest || m.Ambiguous {
					t.Errorf("[%d] = %v id %s method %q target %q (%v) arguments %s rest %s ambiguous %v,\nwant %v id %s method %q target %q arguments %s rest %s",
						i, m.Kind, m.ID, m.Method, m.Target, m.HasTarget, m.Arguments, m.Rest, m.Ambiguous, w.kind, w.id, w.method, w.target, w.arguments, w.rest)
				}
			}
		})
	}
}

func TestParseFindings(t *testing.T) {
	deep := strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
	big := call(`{"name":"read","arguments":{"x":"` + strings.Repeat("a", MaxBody) + `"}}`)
	many := "[" + strings.Repeat(`{"jsonrpc":"2.0","method":"ping","id":1},`, MaxBatch) + `{"jsonrpc":"2.0","method":"ping","id":1}]`
	tests := []struct {
		name string
		body string
		msg  int    // the message the finding names (-1 the body)
		want string // a part of one finding's text
	}{
		// Keys: duplicates, case, escapes, controls.
		{"name beside Name", call(`{"name":"read","Name":"delete"}`), 0, `the keys "name" and "Name" in params differ only by case`},
		{"Name alone", call(`{"Name":"delete"}`), 0, `"Name" in params differs from "name" only by case`},
		{"paramſ beside params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"},"paramſ":{"name":"delete"}}`, 0, `the keys "params" and "param\u017f" in the top-level object differ only by case`},
		{"paramſ alone", `{"jsonrpc":"2.0","id":1,"method":"tools/list","paramſ":{"cursor":"x"}}`, 0, `"param\u017f" in the top-level object differs from "params" only by case`},
		{"ARGUMENTS beside name", call(`{"name":"read","ARGUMENTS":{"path":"/etc"}}`), 0, `differs from "arguments" only by case`},
		{"a Kelvin sign", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"k":1,"\u212a":2}}}`, 0, `differ only by case`},
		{"name\\u0000 beside name", call(`{"name\u0000":"delete","name":"read"}`), 0, `the key "name\x00" in params holds a control or invisible character`},
		{"name with a zero-width space", call(`{"name\u200b":"delete","name":"read"}`), 0, `holds a control or invisible character`},
		{"n\\u0061me", call(`{"n\u0061me":"read"}`), 0, `is written with escapes ("n\\u0061me")`},
		{"method written with escapes as a key", `{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/call","params":{"name":"read"}}`, 0, `written with escapes`},
		{"a key twice", call(`{"name":"read","name":"delete"}`), 0, `the key "name" appears twice in params`},
		{"a key twice, once escaped", call(`{"name":"read","n\u0061me":"delete"}`), 0, `the key "name" appears twice in params`},
		{"a key twice deep in arguments", call(`{"name":"read","arguments":{"a":{"b":[{"c":1,"c":2}]}}}`), 0, `the key "c" appears twice in params.arguments.a.b[0]`},
		{"a method twice", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"x"}}`, 0, `the key "method" appears twice`},
		{"keys differing by case in arguments", call(`{"name":"read","arguments":{"path":"/tmp","Path":"/etc"}}`), 0, `the keys "path" and "Path" in params.arguments differ only by case`},
		{"a key twice in _meta", call(`{"name":"read","_meta":{"p":1,"p":2}}`), 0, `appears twice in params._meta`},
		{"a key twice in a batch's second message", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"id":3,"method":"ping"}]`, 1, `the key "id" appears twice in [1]`},
		{"many keys, a duplicate past the scan", call(`{"name":"read","arguments":{` + manyKeys(40) + `,"k7":0}}`), 0, `the key "k7" appears twice`},
		{"many keys, a case twin past the scan", call(`{"name":"read","arguments":{` + manyKeys(40) + `,"K39":0}}`), 0, `differ only by case`},

		// The envelope.
		{"no jsonrpc", `{"id":1,"method":"ping"}`, 0, `no jsonrpc member`},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, 0, `jsonrpc is "1.0"`},
		{"jsonrpc a number", `{"jsonrpc":2.0,"id":1,"method":"ping"}`, 0, `jsonrpc is "(a number)"`},
		// What looks like a credential is hidden whole before the text is cut to 40 bytes.
		{"jsonrpc a credential", `{"jsonrpc":"` + strings.Repeat("Tk9x", 12) + `","id":1,"method":"ping"}`, 0, `jsonrpc is "[48 characters]", not`},
		{"a credential as a key twice", call(`{"name":"read","arguments":{"` + strings.Repeat("Tk9x", 12) + `":1,"` + strings.Repeat("Tk9x", 12) + `":2}}`), 0, `the key "[48 characters]" appears twice in params.arguments`},
		{"a number method", `{"jsonrpc":"2.0","id":1,"method":5}`, 0, `the method is a number, not a string`},
		{"an array method", `{"jsonrpc":"2.0","id":1,"method":["tools/call"]}`, 0, `the method is an array`},
		{"an empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, 0, `an empty method`},
		{"a method in another case", `{"jsonrpc":"2.0","id":1,"method":"Tools/Call","params":{"name":"delete"}}`, 0, `differs from tools/call only by case`},
		{"a method with a long s", `{"jsonrpc":"2.0","id":1,"method":"toolſ/call","params":{"name":"delete"}}`, 0, `differs from tools/call only by case`},
		{"a method with a space", `{"jsonrpc":"2.0","id":1,"method":"tools/call ","params":{"name":"delete"}}`, 0, `holds white space or a control`},
		{"a method with a NUL", `{"jsonrpc":"2.0","id":1,"method":"tools/call\u0000","params":{"name":"delete"}}`, 0, `holds white space or a control`},
		{"a long method", `{"jsonrpc":"2.0","id":1,"method":"` + strings.Repeat("m", MaxName+1) + `"}`, 0, `over 1024`},
		{"a null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"read"}}`, 0, `the id is null`},
		{"an object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, 0, `the id is an object`},
		{"a long id", `{"jsonrpc":"2.0","id":"` + strings.Repeat("i", MaxID) + `","method":"ping"}`, 0, `over 256`},
		{"array params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["delete"]}`, 0, `params is an array`},
		{"a response carrying a method", `{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{},"params":{"name":"delete"}}`, 0, `a response (result or error) that carries a method`},
		{"result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, 0, `both a result and an error`},
		{"a response without an id", `{"jsonrpc":"2.0","result":{}}`, 0, `a response without an id`},
		{"neither", `{"jsonrpc":"2.0","id":1}`, 0, `neither a method nor a result`},

		// What a call acts on.
		{"tools/call without params", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, 0, `tools/call without params`},
		{"tools/call without a name", call(`{"arguments":{}}`), 0, `tools/call without params.name`},
		{"a number name", call(`{"name":7}`), 0, `params.name of tools/call is a number`},
		{"an empty name", call(`{"name":""}`), 0, `params.name of tools/call is empty`},
		{"a name with a NUL escape", call(`{"name":"read\u0000"}`), 0, `holds a control or invisible character`},
		{"a name with a bidi override", call(`{"name":"read\u202e"}`), 0, `holds a control or invisible character`},
		{"a name with a space before", call(`{"name":" read"}`), 0, `begins or ends with white space`},
		{"a long name", call(`{"name":"` + strings.Repeat("n", MaxName+1) + `"}`), 0, `over 1024`},
		{"array arguments", call(`{"name":"read","arguments":["/etc"]}`), 0, `params.arguments of tools/call is an array`},
		{"resources/read without a uri", `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{}}`, 0, `resources/read without params.uri`},
		{"a number past a float64's digits", call(`{"name":"read","arguments":{"n":9007199254740993}}`), 0, `the number "9007199254740993" at params.arguments.n has more digits`},

		// The body.
		{"data after the message", call(`{"name":"read"}`) + ` {"jsonrpc":"2.0"}`, -1, `data after the JSON text`},
		{"two messages back to back", call(`{"name":"read"}`) + call(`{"name":"delete"}`), -1, `data after the JSON text`},
		{"invalid JSON", `{"jsonrpc":"2.0",}`, -1, `invalid JSON at byte 17`},
		{"a truncated body", `{"jsonrpc":"2.0","id":1,"method":"tools/ca`, -1, `invalid JSON`},
		{"an empty body", ``, -1, `the body is empty`},
		{"a string body", `"tools/call"`, -1, `the body is a string`},
		{"an empty batch", `[]`, -1, `an empty batch`},
		{"a batch element that is no object", `[{"jsonrpc":"2.0","id":1,"method":"ping"},"delete"]`, 1, `[1]: a string where a JSON-RPC message`},
		{"a nested batch", `[[{"jsonrpc":"2.0","id":1,"method":"ping"}]]`, 0, `[0]: an array where`},
		{"a batch over the limit", many, -1, `a batch of more than 256 messages`},
		{"nesting too deep", call(`{"name":"read","arguments":` + deep + `}`), -1, `nests deeper than 128 levels`},
		{"a body over the limit", big, -1, `over the 8388608 bytes`},
		{"much data in many nested objects", call(`{"name":"w","arguments":` + strings.Repeat(`{"b":0,"a":`, 20) + `"` + strings.Repeat("x", 1<<20) + `"` + strings.Repeat("}", 20) + `}`), -1, `would copy over`},
		{"invalid UTF-8", call("{\"name\":\"re\xffad\"}"), -1, `not valid UTF-8`},
		{"a lone surrogate", call(`{"name":"read\ud800"}`), -1, `a lone surrogate escape`},
		{"a number out of range", call(`{"name":"read","arguments":{"n":1e999}}`), -1, `out of range`},
		{"a byte-order mark", "\ufeff" + call(`{"name":"read"}`), -1, `invalid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Parse([]byte(tt.body))
			if !b.Ambiguous() {
				t.Fatalf("no finding; messages %+v", b.Messages)
			}
			found := false
			for _, f := range b.Findings {
				if strings.Contains(f.Text, tt.want) && f.Message == tt.msg {
					found = true
				}
				if f.Refuse {
					t.Errorf("a body finding with Refuse set: %q", f.Text)
				}
				if f.Text == "" || strings.ContainsAny(f.Text, "\r\n\x00\x1b") {
					t.Errorf("finding text %q", f.Text)
				}
			}
			if !found {
				t.Errorf("findings %+v, want one of message %d with %q", b.Findings, tt.msg, tt.want)
			}
			for i, m := range b.Messages {
				if (tt.msg == -1 || tt.msg == i) && !m.Ambiguous {
					t.Errorf("message %d not marked ambiguous", i)
				}
			}
		})
	}
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + itoa(i) + `":` + itoa(i))
	}
	return b.String()
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// TestParseBatchElements: in a batch, a finding names its element, and only that element is
// ambiguous; the others are read as they are.
func TestParseBatchElements(t *testing.T) {
	b := Parse([]byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","Name":"delete"}}]`))
	if len(b.Messages) != 2 || b.Messages[0].Ambiguous || !b.Messages[1].Ambiguous {
		t.Fatalf("messages %+v, want the second alone ambiguous", b.Messages)
	}
	for _, f := range b.Findings {
		if f.Message != 1 {
			t.Errorf("finding %+v names another message than the second", f)
		}
	}
}

// TestParseFindingsBounded: a body full of ambiguities reports MaxFindings, the last saying how
// many more, and is read to the end.
func TestParseFindingsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"a":` + itoa(i))
	}
	b.WriteString(`}}} x`)
	got := Parse([]byte(b.String()))
	if len(got.Findings) != MaxFindings {
		t.Fatalf("%d findings, want %d", len(got.Findings), MaxFindings)
	}
	if last := got.Findings[MaxFindings-1]; last.Message != -1 || !strings.Contains(last.Text, "more findings") {
		t.Errorf("the last finding is %+v, want the count of the rest", last)
	}
}
