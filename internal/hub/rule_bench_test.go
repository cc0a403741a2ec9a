package hub

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// BenchmarkAskRule: an agent's request for a rule at its bounds (a 2 KiB rule, its diff, a
// 1 KiB reason of characters escaping makes longest) into the embedded store, and the size of
// the ticket kept (ticket-bytes), which a container holds hubapi.MaxRulePending of.
func BenchmarkAskRule(b *testing.B) {
	h, _ := newHub(&testing.T{}, "")
	rule := strings.Repeat("r", hubapi.MaxRuleText)
	h.cfg.CheckRule = func(container, r string) (RuleAsk, error) {
		return RuleAsk{Rule: rule, Diff: rule + strings.Repeat("d", 512), Loosens: strings.Repeat("l", 200), Version: "sha256:" + strings.Repeat("0", 64)}, nil
	}
	reason := strings.Repeat("\x1b", hubapi.MaxRuleReason)
	var size int
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		t, err := h.AskRule("g", RuleRequest{Container: fmt.Sprintf("c%d", i), Rule: rule, Reason: reason})
		if err != nil {
			b.Fatal(err)
		}
		if size == 0 {
			data, _ := json.Marshal(t)
			size = len(data)
		}
	}
	b.ReportMetric(float64(size), "ticket-bytes")
}
