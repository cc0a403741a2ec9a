package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// The recent decisions show the gate's FREE and DENY decisions as they arrive, with the humans'
// decisions; f filters them: all, refused, asks.
func TestTrafficInRecentDecisions(t *testing.T) {
	s := newSetup(t)
	tl := traffic.NewLog(0)
	s.cfg.Traffic = tl
	a := ask(t, s.hub, hub.AskRequest{URL: "https://asked.example.com/by-a-human"})
	d := s.start(t)
	if _, err := s.hub.Decide(a.ID, a.Fingerprint, true, "phone:pixel", ""); err != nil {
		t.Fatal(err)
	}
	now := s.clk.Now()
	tl.Add(traffic.Batch{Entries: []traffic.Entry{
		{Time: now, ID: "r-1", Container: "dev", Method: "GET", URL: "https://free.example.com/read", Verdict: "FREE", Rule: "reads", Status: 200},
		{Time: now.Add(time.Second), ID: "r-2", Container: "dev", Method: "POST", URL: "https://evil.example.net/up", Verdict: "DENY",
			Code: "E_DENY_HOST", Reason: "the host is not in the policy", Status: 403},
		{Time: now.Add(2 * time.Second), ID: "r-3", Container: "dev", Method: "POST", URL: "https://asked.example.com/by-a-human",
			Verdict: "ASK", Rule: "ask-writes", Approver: "phone:pixel", Status: 200},
	}})
	d.waitView("https://evil.example.net/up")
	d.waitView("approved  phone:pixel") // the hub's event may come after the traffic's
	v := d.view()
	for _, want := range []string{"[all] refused asks", "FREE", "https://free.example.com/read", "200 reads",
		"DENY", "E_DENY_HOST", "— the host is not in", "by phone:pixel", "approved  phone:pixel", "f filter"} {
		if !shows(v, want) {
			t.Errorf("all: want %q; got\n%s", want, v)
		}
	}
	if i, j := strings.Index(v, "https://evil.example.net/up"), strings.Index(v, "https://free.example.com/read"); i < 0 || j < i {
		t.Errorf("the latest decision goes first; got\n%s", v)
	}

	d.key("f")
	d.waitView("all [refused] asks")
	v = d.view()
	if !shows(v, "E_DENY_HOST") || strings.Contains(v, "https://free.example.com/read") || strings.Contains(v, "approved  phone:pixel") {
		t.Errorf("refused: want the DENY only; got\n%s", v)
	}
	d.key("f")
	d.waitView("all refused [asks]")
	v = d.view()
	if !shows(v, "approved  phone:pixel") || !shows(v, "by phone:pixel") || strings.Contains(v, "E_DENY_HOST") || strings.Contains(v, "free.example.com") {
		t.Errorf("asks: want the human's decision and the asked request; got\n%s", v)
	}
	d.key("f")
	d.waitView("[all] refused asks")

	// What arrives later shows at once, escaped; what the gate could not send is counted.
	tl.Add(traffic.Batch{Entries: []traffic.Entry{{Time: now.Add(3 * time.Second), ID: "r-4", Container: "dev\x1b[2J", Method: "GET",
		URL: "https://late.example.com/\u202e", Verdict: "FREE", Status: 200}}, Dropped: 12})
	d.waitView(`https://late.example.com/\u{202E}`)
	v = d.view()
	if strings.Contains(v, "\x1b[2J") || strings.Contains(v, "\u202e") || !shows(v, `dev\x1b[2J`) {
		t.Errorf("hostile traffic is not escaped; got %q", v)
	}
	if !shows(v, "12 not shown: the gate could not send them") {
		t.Errorf("no count of the dropped; got\n%s", v)
	}
}

// Without a traffic log the recent decisions are the humans' only, with no filter to switch.
func TestNoTrafficLog(t *testing.T) {
	s := newSetup(t)
	d := s.start(t)
	v := d.view()
	if strings.Contains(v, "[all]") || strings.Contains(v, "f filter") {
		t.Fatalf("a filter without traffic; got\n%s", v)
	}
}
