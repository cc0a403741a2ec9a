package mcp

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// FuzzStreamPassesNoHiddenTool: whatever a server sends, a stream that cuts passes no event
// in which a lenient reader (encoding/json, which takes the last of two keys and matches keys
// in any case) finds a tool the filter hides in the result for a listed id; and it passes only
// whole events, each of whose data the strict reader reads without a finding.
func FuzzStreamPassesNoHiddenTool(f *testing.F) {
	f.Add([]byte("event: message\r\nid: 1\r\ndata: "+listAnswer("1", readTool, deleteTool)+"\r\n\r\n: c\n\n"), []byte{1, 2, 3})
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\ndata:\"id\":1,\"result\":{\"tools\":["+deleteTool+"]}}\n\n"), []byte{7})
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[],\"Tools\":["+deleteTool+"]}}\n\n"), []byte{4})
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":["+readTool+"]}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":["+deleteTool+"]}}\n\n"), []byte{9})
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		var pieces []int
		for _, s := range sizes {
			pieces = append(pieces, int(s)%16+1)
		}
		fl := &Filter{Lists: []ID{ID("1")}, Allow: allowRead}
		out, _ := feed(fl.Stream(512), string(stream), pieces...)
		for _, data := range lenientEvents(out) {
			if isRefusalOf(data) {
				continue
			}
			var msg struct {
				ID     json.RawMessage
				Result struct{ Tools []struct{ Name string } }
			}
			if json.Unmarshal([]byte(data), &msg) == nil && strings.TrimSpace(string(msg.ID)) == "1" {
				for _, tool := range msg.Result.Tools {
					if !allowRead(tool.Name) {
						t.Fatalf("the cut stream passed the hidden tool %q: %q", tool.Name, out)
					}
				}
			}
			if _, rep, err := (&Filter{Lists: []ID{ID("1")}}).JSON([]byte(data)); err != nil || len(rep.Findings) > 0 {
				t.Fatalf("the cut stream passed an event the strict reader finds ambiguous: %q: %v %v", data, err, rep.Findings)
			}
		}
	})
}

var refusalRE = regexp.MustCompile(`^\{"jsonrpc":"2\.0","id":[^{]*,"error":\{"code":-32010,`)

func isRefusalOf(data string) bool { return refusalRE.MatchString(data) }

// lenientEvents splits an event stream as a lenient reader does: lines end at CRLF, LF or CR,
// an event at a blank line or the end, data lines joined with a newline.
func lenientEvents(stream string) []string {
	stream = strings.ReplaceAll(strings.ReplaceAll(stream, "\r\n", "\n"), "\r", "\n")
	var out []string
	for _, ev := range strings.Split(stream, "\n\n") {
		var data []string
		has := false
		for _, line := range strings.Split(ev, "\n") {
			if d, ok := strings.CutPrefix(line, "data"); ok && (d == "" || d[0] == ':') {
				has = true
				data = append(data, strings.TrimPrefix(strings.TrimPrefix(d, ":"), " "))
			}
		}
		if has {
			out = append(out, strings.Join(data, "\n"))
		}
	}
	return out
}
