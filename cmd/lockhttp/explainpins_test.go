package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const pinsPolicy = `version = 1

[sources]
coder = ["172.30.0.10"]

[[mcp]]
name = "files"
host = "mcp.example.com"
path = "/mcp"

[[mcp.rule]]
name = "reads"
tools = ["read", "lookup*"]
verdict = "free"
`

// TestExplainMCPPins: with the gate's pins file (--mcp-pins), explain decides a call of a tool
// whose definition changed, or of a name first listed after the pins, as the gate does
// (mcp:pin-changed, ASK); without it, or for a tool as pinned, as the rules say.
func TestExplainMCPPins(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("policy.toml", []byte(pinsPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load("policy.toml", []byte(pinsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := pol.MCPEndpoints()[0]
	tool := func(def string) mcp.Tool {
		tl, err := mcp.PinTool([]byte(def))
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	pins := mcp.Pins{}
	pins.Listed(e, []mcp.Tool{tool(`{"name":"read","description":"reads"}`), tool(`{"name":"lookup"}`)})
	pins.Listed(e, []mcp.Tool{tool(`{"name":"read","description":"reads, and mails it"}`), tool(`{"name":"lookup"}`), tool(`{"name":"lookup2"}`)})
	data, _ := json.Marshal(pins)
	file := filepath.Join(dir, "mcp-pins.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	explainRule := func(tool string, extra ...string) string {
		t.Helper()
		args := append([]string{"explain", "--policy", "policy.toml", "--container", "coder"}, extra...)
		args = append(args, "POST", "https://mcp.example.com/mcp", "-H", "Content-Type: application/json",
			"-d", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`)
		var stdout, stderr bytes.Buffer
		if code := run(args, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("explain: exit %d\n%s", code, stderr.String())
		}
		var out struct{ Verdict, Rule, Reason string }
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		return out.Verdict + " " + out.Rule
	}
	for _, c := range []struct {
		tool, pins, want string
	}{
		{"read", "", "FREE mcp:files:reads"},
		{"read", file, "ASK mcp:pin-changed"},
		{"lookup2", file, "ASK mcp:pin-changed"},
		{"lookup", file, "FREE mcp:files:reads"},
	} {
		var extra []string
		if c.pins != "" {
			extra = []string{"--mcp-pins", c.pins}
		}
		if got := explainRule(c.tool, extra...); got != c.want {
			t.Errorf("%s with pins %q: %s, want %s", c.tool, c.pins, got, c.want)
		}
	}
}
