package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

var denied = Refusal{Code: policy.CodeRule, Rule: "no-delete", Reason: "the tool delete is denied"}

func TestRefusalError(t *testing.T) {
	advice := policy.CodeRule.Advice()
	tests := []struct {
		name string
		id   ID
		r    Refusal
		want string
	}{
		{name: "a number id", id: ID("7"), r: denied,
			want: `{"jsonrpc":"2.0","id":7,"error":{"code":-32010,"message":"lockhttp refused this call (E_RULE, rule no-delete): the tool delete is denied. What to do: ` + advice + `","data":{"lockhttp":{"code":"E_RULE","rule":"no-delete","reason":"the tool delete is denied","what_to_do":"` + advice + `"}}}}`},
		{name: "a string id as written", id: ID(`"r\u0031"`), r: Refusal{Code: policy.CodePending, Reason: "waiting for a human", Ticket: "t-9", RetryAfter: 5},
			want: `{"jsonrpc":"2.0","id":"r\u0031","error":{"code":-32010,"message":"lockhttp refused this call (E_PENDING): waiting for a human. What to do: ` + policy.CodePending.Advice() + ` (ticket t-9)","data":{"lockhttp":{"code":"E_PENDING","reason":"waiting for a human","what_to_do":"` + policy.CodePending.Advice() + `","ticket":"t-9","retry_after":5}}}}`},
		{name: "no id", id: nil, r: denied,
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32010,"message":"lockhttp refused this call (E_RULE, rule no-delete): the tool delete is denied. What to do: ` + advice + `","data":{"lockhttp":{"code":"E_RULE","rule":"no-delete","reason":"the tool delete is denied","what_to_do":"` + advice + `"}}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.r.Error(tt.id)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestRefusalEscapes: a reason that carries a request's text reaches the model escaped: no
// terminal control, no bidi override, no line break of its own.
func TestRefusalEscapes(t *testing.T) {
	r := Refusal{Code: policy.CodeDenied, Rule: "r\x1b[2J", Reason: "the tool \"rm\u202e\" with\nnew lines"}
	for _, body := range [][]byte{r.Error(ID("1")), r.ToolResult(ID("1"))} {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		text := string(body)
		for _, bad := range []string{"\x1b", "\u202e", `\u001b`, `\u202e`, `\n`} {
			if strings.Contains(text, bad) {
				t.Errorf("%s holds %q", body, bad)
			}
		}
		if !strings.Contains(text, `\\x1b[2J`) || !strings.Contains(text, `\\u{202E}`) {
			t.Errorf("%s does not show the escapes", body)
		}
	}
}

func TestRefusalToolResult(t *testing.T) {
	got := string(denied.ToolResult(ID("3")))
	want := `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"lockhttp refused this call (E_RULE, rule no-delete): the tool delete is denied. What to do: ` + policy.CodeRule.Advice() + `"}],"isError":true,"_meta":{"lockhttp":{"code":"E_RULE","rule":"no-delete","reason":"the tool delete is denied","what_to_do":"` + policy.CodeRule.Advice() + `"}}}}`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestAnswer(t *testing.T) {
	onlyDelete := func(b *Body) func(int) (Refusal, bool) {
		return func(i int) (Refusal, bool) {
			if i < 0 || b.Messages[i].Target == "delete" {
				return denied, true
			}
			return Refusal{}, false
		}
	}
	all := func(*Body) func(int) (Refusal, bool) { return func(int) (Refusal, bool) { return denied, true } }
	tests := []struct {
		name    string
		body    string
		refused func(*Body) func(int) (Refusal, bool)
		style   Style
		sse     bool
		want    string // the ids answered, in order, and how: "7e" an error for id 7, "7r" a tool result
		batch   bool   // the JSON answer is an array
	}{
		{name: "one call", body: call(`{"name":"delete"}`), refused: all, want: "1e"},
		{name: "one call as a tool result", body: call(`{"name":"delete"}`), refused: all, style: AsToolResult, want: "1r"},
		{name: "one call over SSE", body: call(`{"name":"delete"}`), refused: all, sse: true, want: "1e"},
		{name: "a batch [allowed, denied]", body: `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete"}}]`,
			refused: onlyDelete, want: "2e", batch: true},
		{name: "a batch, both refused, over SSE", body: `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}},{"jsonrpc":"2.0","id":"b","method":"tools/list"}]`,
			refused: all, style: AsToolResult, sse: true, want: `1r"b"e`},
		{name: "a batch with a notification", body: `[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"delete"}}]`,
			refused: all, want: "5e", batch: true},
		{name: "notifications alone", body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, refused: all, want: ""},
		{name: "a message with an id that could not be read", body: `{"jsonrpc":"2.0","id":4,"method":5}`, refused: all, want: "4e"},
		{name: "a message without an id that could not be read", body: `{"jsonrpc":"2.0","method":5}`, refused: all, want: "nulle"},
		{name: "a body cut short after its id", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call",`, refused: all, want: "1e"},
		{name: "an unreadable body", body: `{"jsonrpc":"2.0",`, refused: all, want: "nulle"},
		{name: "not JSON", body: `tools/call delete`, refused: all, want: "nulle"},
		{name: "an unreadable batch", body: `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}} x`, refused: all, want: "1e", batch: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Parse([]byte(tt.body))
			out := Answer(b, tt.refused(b), tt.style, tt.sse)
			if tt.want == "" {
				if out != nil {
					t.Fatalf("answer %s, want none", out)
				}
				return
			}
			var msgs []json.RawMessage
			if tt.sse {
				for _, ev := range strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
					data, ok := strings.CutPrefix(ev, "event: message\ndata: ")
					if !ok {
						t.Fatalf("event %q", ev)
					}
					msgs = append(msgs, json.RawMessage(data))
				}
			} else if tt.batch {
				if err := json.Unmarshal(out, &msgs); err != nil {
					t.Fatalf("%s: %v", out, err)
				}
			} else {
				msgs = []json.RawMessage{out}
			}
			got := ""
			for _, m := range msgs {
				var v struct {
					ID     json.RawMessage
					Error  *struct{ Code int }
					Result *struct{ IsError bool }
				}
				if err := json.Unmarshal(m, &v); err != nil {
					t.Fatalf("%s: %v", m, err)
				}
				got += string(v.ID)
				switch {
				case v.Error != nil && v.Error.Code == RefusalCode:
					got += "e"
				case v.Result != nil && v.Result.IsError:
					got += "r"
				}
			}
			if got != tt.want {
				t.Errorf("answered %s (%s), want %s", got, out, tt.want)
			}
		})
	}
}
