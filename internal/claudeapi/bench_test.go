package claudeapi

import (
	"bytes"
	"fmt"
	"testing"
)

// conversation is a long tool-using conversation, about 300 KB, as an agent sends it late in a
// session.
func conversation() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":8192,"stream":true,"system":[{"type":"text","text":"You are a coding agent.","cache_control":{"type":"ephemeral"}}],"tools":[`)
	for i := 0; i < 20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_%d","description":"Does thing %d.","input_schema":{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer"}},"required":["path"]}}`, i, i)
	}
	b.WriteString(`,{"type":"web_search_20250305","name":"web_search"}],"messages":[`)
	for i := 0; i < 200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"assistant","content":[{"type":"text","text":"Reading file %d."},{"type":"tool_use","id":"toolu_%d","name":"tool_1","input":{"path":"src/file_%d.go","n":%d}}]},`, i, i, i, i)
		fmt.Fprintf(&b, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":[{"type":"text","text":%q}]}]}`, i, bytes.Repeat([]byte("package main\n\tfunc f() { return \"x\" }\n"), 20))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func BenchmarkJudgeBody(b *testing.B) {
	body := conversation()
	if free, findings := JudgeBody(body); !free {
		b.Fatalf("not free: %q", findings)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		JudgeBody(body)
	}
}

func BenchmarkJudgePlain(b *testing.B) {
	body := []byte(`{"max_tokens":1024,"messages":[{"role":"user","content":"Hello, Claude"}],"model":"claude-sonnet-4-5-20250929"}`)
	r := Request{Host: "api.anthropic.com", Method: "POST", Path: "/v1/messages?beta=true", Header: jsonHeader(), Body: body, Limit: 8 << 20}
	b.ReportAllocs()
	for b.Loop() {
		Judge(r)
	}
}
