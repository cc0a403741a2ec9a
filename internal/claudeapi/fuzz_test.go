package claudeapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// FuzzJudgeBody holds JudgeBody to what the gate relies on: it never panics, free means no
// findings and not free means at least one, and no body it calls free is one that Go's
// encoding/json refuses or reads as carrying mcp_servers, a container, a tool that is not a
// client tool or web search, a tool that Anthropic's code may call, or a url source. The
// struct below matches keys the way encoding/json does: case-insensitively.
func FuzzJudgeBody(f *testing.F) {
	for _, dir := range []string{"testdata/sdk", "testdata/bad"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil || len(files) == 0 {
			f.Fatalf("no seeds in %s: %v", dir, err)
		}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		free, findings := JudgeBody(body)
		if free != (len(findings) == 0) {
			t.Fatalf("free = %v with findings %q", free, findings)
		}
		for _, s := range findings {
			if s == "" || strings.ContainsAny(s, "\r\n") {
				t.Fatalf("bad finding %q", s)
			}
		}
		if !free {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("free, but encoding/json refuses it: %v", err)
		}
		var s struct {
			MCPServers any              `json:"mcp_servers"`
			Container  any              `json:"container"`
			Tools      []map[string]any `json:"tools"`
		}
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("free, but encoding/json refuses it as a request: %v", err)
		}
		if s.MCPServers != nil {
			t.Fatalf("free, but encoding/json reads mcp_servers %v", s.MCPServers)
		}
		if s.Container != nil {
			t.Fatalf("free, but encoding/json reads container %v", s.Container)
		}
		for i, tool := range s.Tools {
			if !oracleFreeTool(tool) {
				t.Fatalf("free, but encoding/json reads tools[%d] as %v", i, tool)
			}
		}
		if p := oracleURLSource(m, "$"); p != "" {
			t.Fatalf("free, but encoding/json reads a url source at %s", p)
		}
	})
}

// oracleFreeTool is the rule written plainly over encoding/json's reading of a tool.
func oracleFreeTool(tool map[string]any) bool {
	if tool == nil {
		return false
	}
	if ac, ok := tool["allowed_callers"]; ok {
		list, ok := ac.([]any)
		if !ok {
			return false
		}
		for _, c := range list {
			if c != "direct" {
				return false
			}
		}
	}
	typ, ok := tool["type"]
	if !ok || typ == nil {
		return true
	}
	s, ok := typ.(string)
	if !ok {
		return false
	}
	if s == "custom" || strings.HasPrefix(s, "web_search_") {
		return true
	}
	for _, p := range clientToolPrefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// oracleURLSource finds, anywhere in v, an object whose "source" is an object of type "url", and
// returns where it is.
func oracleURLSource(v any, at string) string {
	switch v := v.(type) {
	case map[string]any:
		if src, ok := v["source"].(map[string]any); ok && src["type"] == "url" {
			return at
		}
		for k, e := range v {
			if p := oracleURLSource(e, at+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for _, e := range v {
			if p := oracleURLSource(e, at+"[]"); p != "" {
				return p
			}
		}
	}
	return ""
}

// FuzzJudge holds Judge to its shape on any method, path, coding and body: it never panics,
// every decision has a rule and a reason, every ASK is NeverAuto with findings, only a
// Messages API ASK is red, the Files API always asks, and a path that only names
// /v1/messages in another form is never free.
func FuzzJudge(f *testing.F) {
	plain, err := os.ReadFile("testdata/sdk/plain.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("POST", "/v1/messages?beta=true", "", plain)
	f.Add("POST", "/V1/messages", "gzip", gzipped(f, plain))
	f.Add("POST", "/v1/messages", "br", brotlied(f, plain))
	f.Add("POST", "/v1/messages", "deflate, gzip", gzipped(f, deflated(f, plain)))
	f.Add("GET", "/v1/files/../models", "", []byte(nil))
	f.Add("POST", "/v1/oauth/x%2F..%2F..%2Ffiles", "", []byte(nil))
	f.Fuzz(func(t *testing.T, method, path, coding string, body []byte) {
		h := jsonHeader()
		h.Set("Content-Encoding", coding)
		j := Judge(Request{Host: "api.anthropic.com", Method: method, Path: path, Header: h, Body: body, Limit: 1 << 16})
		if j.Rule == "" || j.Reason == "" || strings.ContainsAny(j.Reason, "\r\n") {
			t.Fatalf("bad decision %+v", j)
		}
		if (j.Verdict == policy.Ask) != j.NeverAuto || j.Verdict == policy.Ask && len(j.Findings) == 0 {
			t.Fatalf("ASK without NeverAuto or findings: %+v", j)
		}
		if j.Red && (j.Verdict != policy.Ask || j.Rule != RuleMessages) {
			t.Fatalf("red on %+v", j)
		}
		p, _, _ := strings.Cut(path, "?")
		loose := loosePath(policy.CleanPath(p))
		if (loose == "/v1/files" || strings.HasPrefix(loose, "/v1/files/")) && j.Rule != RuleFiles {
			t.Fatalf("%s %q is the Files API, decided by %s", method, path, j.Rule)
		}
		if method == "POST" && (loose == "/v1/messages" || loose == "/v1/messages/count_tokens") {
			if j.Rule != RuleMessages && j.Rule != RuleSize {
				t.Fatalf("POST %q decided by %s", path, j.Rule)
			}
			if j.Verdict == policy.Free && policy.CleanPath(p) != loose {
				t.Fatalf("POST %q is free", path)
			}
		}
	})
}
