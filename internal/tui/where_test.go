package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// unwrapped is the screen v with the lines a URL wrapped onto joined to the line before them.
func unwrapped(v string) string {
	var out []string
	for _, l := range strings.Split(ansi.Strip(v), "\n") {
		l = strings.TrimRight(l, " ")
		if c, ok := strings.CutPrefix(l, wrapIndent); ok && len(out) > 0 && !strings.HasPrefix(c, " ") {
			out[len(out)-1] += c
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// The header names the proxy's address (as the gate reports it) and the CA certificate agents
// trust, so that a person can set up an agent by hand without quitting; on an 80-column
// terminal, and wrapped rather than cut when they do not fit on one line.
func TestHeaderShowsProxyAndCA(t *testing.T) {
	const ca = "/home/alice/src/a-project-with-a-long-name/.lockfamily/ca/ca.pem"
	s := newSetup(t)
	s.size = [2]int{80, 24}
	s.cfg.CACert = ca
	d := s.start(t)
	v := d.view()
	if !strings.Contains(v, "proxy ? (the gate has not reported its address yet)") || !strings.Contains(v, "CA "+ca) {
		t.Errorf("before the gate reports: want the proxy unknown and the CA; got\n%s", v)
	}
	s.hub.SetGateState(hub.GateState{PolicyVersion: "sha256:0123456789abcdef0123", Signer: "ok", Audit: "ok", Listen: "127.0.0.1:3150"})
	d.waitFor("the gate's report", func() bool { return d.m.gate.Listen != "" })
	v = d.view()
	lines := strings.Split(v, "\n")
	head := strings.Join(lines[:3], "\n")
	if !strings.Contains(head, "proxy http://127.0.0.1:3150") || !strings.Contains(head, "CA "+ca) {
		t.Errorf("want the proxy and the whole CA path under the header's first line; got\n%s", v)
	}
	if strings.Index(v, ca[:20]) > strings.Index(v, "Pending tickets") {
		t.Errorf("the proxy and the CA go in the header, above the list; got\n%s", v)
	}
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("line %q is %d wide, want at most 80", l, w)
		}
	}

	// A path with control characters is shown escaped.
	s.cfg.CACert = "/tmp/ca\x1b[2J.pem"
	d = s.start(t)
	if v := d.view(); !strings.Contains(v, `CA /tmp/ca\x1b[2J.pem`) {
		t.Errorf("want the CA path escaped; got\n%s", v)
	}
}

// On an 80-column terminal the selected ticket's URL is shown whole, wrapped under its line:
// what y approves is seen to its end. The other tickets keep one line each.
func TestSelectedTicketURLWraps(t *testing.T) {
	const end = "/refs/heads/the-branch-name-at-the-end-of-a-long-url-0123456789"
	url := "https://api.github.com/repos/an-owner/a-repository" + end
	s := newSetup(t)
	s.size = [2]int{80, 24}
	ask(t, s.hub, hub.AskRequest{URL: "https://other.example.com/" + strings.Repeat("o", 120), Rule: "ask-writes"})
	s.clk.Advance(time.Second)
	ask(t, s.hub, hub.AskRequest{URL: url, Rule: "ask-writes"}) // the newest: first, selected
	d := s.start(t)
	v := d.view()
	if !strings.Contains(unwrapped(v), url+"  ask-") {
		t.Fatalf("the selected ticket's URL is cut; want all of %q, then its rule (cut at the edge); got\n%s", url, v)
	}
	var sel []string
	for _, l := range strings.Split(v, "\n") {
		if strings.HasPrefix(l, ">") || len(sel) > 0 && strings.HasPrefix(l, wrapIndent) {
			sel = append(sel, l)
		} else if len(sel) > 0 {
			break
		}
	}
	if len(sel) < 2 || !strings.Contains(sel[len(sel)-1], "0123456789  ask-") {
		t.Errorf("want the selected ticket over several lines, its rule after the URL on the last; got %q in\n%s", sel, v)
	}
	if strings.Count(v, "https://other.example.com/") != 1 || shows(v, strings.Repeat("o", 120)) {
		t.Errorf("the ticket not selected keeps one line, cut; got\n%s", v)
	}

	// Down selects the other: its URL wraps now, at most urlLines lines, ending in "…" (the
	// details show all of it).
	s.settle()
	d.key("down")
	v = d.view()
	if !strings.Contains(unwrapped(v), "https://other.example.com/"+strings.Repeat("o", 120)+"  ask-writes") {
		t.Errorf("the newly selected ticket's URL: want it wrapped; got\n%s", v)
	}
	if strings.Contains(unwrapped(v), url) {
		t.Errorf("want the first ticket cut to its line again; got\n%s", v)
	}
	d.key("up")

	// A URL longer than urlLines lines ends in "…".
	huge := "https://api.example.com/" + strings.Repeat("z", 2000)
	s.clk.Advance(time.Second)
	ask(t, s.hub, hub.AskRequest{URL: huge})
	d.waitFor("the third ticket", func() bool { return len(d.m.pending) == 3 })
	s.settle()
	for d.m.selected != d.m.pending[0].ID {
		d.key("up")
	}
	v = d.view()
	n := 0
	for _, l := range strings.Split(v, "\n") {
		if strings.Contains(l, "zzzzzzzz") {
			n++
		}
	}
	if n != urlLines || !strings.Contains(v, "zzz…") {
		t.Errorf("a 2,000-character URL takes %d lines, want %d, the last ending in …; got\n%s", n, urlLines, v)
	}
	for _, l := range strings.Split(v, "\n") {
		if ansi.StringWidth(l) > 80 {
			t.Errorf("line %q is %d wide, want at most 80", l, ansi.StringWidth(l))
		}
	}
}

// The recent decisions wrap a URL that does not fit on an 80-column line rather than cut it.
func TestRecentURLWraps(t *testing.T) {
	const url = "https://registry.npmjs.org/@types/node/-/node-20.11.5-and-the-end.tgz"
	s := newSetup(t)
	s.size = [2]int{80, 30}
	tl := traffic.NewLog(0)
	s.cfg.Traffic = tl
	d := s.start(t)
	now := s.clk.Now()
	tl.Add(traffic.Batch{Entries: []traffic.Entry{
		{Time: now, ID: "r-1", Container: "agent", Method: "GET", URL: url, Verdict: "FREE", Rule: "trusted", Status: 200},
		{Time: now.Add(time.Second), ID: "r-2", Container: "agent", Method: "GET", URL: "https://short.example.com/", Verdict: "FREE", Status: 200},
	}})
	d.waitView("https://short.example.com/")
	v := d.view()
	if !strings.Contains(unwrapped(v), url+"  200 trusted") {
		t.Errorf("want the whole URL %q, then its status and rule; got\n%s", url, v)
	}
	if !strings.Contains(v, "https://short.example.com/\n"+wrapIndent+"200") || strings.Contains(v, "https://short.example.com/…") {
		t.Errorf("a URL that fits with no room for its status beside it: want the status on the next line, never an … after the URL; got\n%s", v)
	}
	for _, l := range strings.Split(v, "\n") {
		if ansi.StringWidth(l) > 80 {
			t.Errorf("line %q is %d wide, want at most 80", l, ansi.StringWidth(l))
		}
	}
	// Wider, it takes one line again.
	d.send(tea.WindowSizeMsg{Width: 200, Height: 30})
	if v := d.view(); !strings.Contains(v, url) {
		t.Errorf("200 columns: want the URL on one line; got\n%s", v)
	}
}

// The pairing page says when its link names this machine's loopback, which no phone reaches,
// and names the fix; a link a phone can open gets no such word.
func TestPairingOnLoopbackSaysSo(t *testing.T) {
	for _, tc := range []struct {
		url  string
		warn bool
	}{
		{"http://127.0.0.1:3131/phone/#pair=3b1f0c9a", true},
		{"http://[::1]:3131/phone/#pair=3b1f0c9a", true},
		{"http://192.168.1.20:3131/phone/#pair=3b1f0c9a", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			s := newSetup(t)
			s.size = [2]int{120, 60}
			s.cfg.PairingURL = func() (string, error) { return tc.url, nil }
			d := s.start(t)
			d.key("p")
			d.waitFor("the QR page", func() bool { return d.m.overlay == overlayQR && d.m.qrURL != "" })
			v := d.view()
			said := shows(v, "This link names this machine's loopback, which no phone reaches: only a browser on this machine opens it. Fix: make the hub reachable from the phone")
			if said != tc.warn {
				t.Errorf("warning shown: %v, want %v; got\n%s", said, tc.warn, v)
			}
			if tc.warn && !shows(v, `docs/phone.md, "Reaching the hub from the phone"`) {
				t.Errorf("want the fix's section named; got\n%s", v)
			}
			if !strings.Contains(v, "█") || !strings.Contains(v, tc.url) {
				t.Errorf("want the QR code and the link all the same; got\n%s", v)
			}
		})
	}
}

// BenchmarkViewLongURLs draws an 80x24 screen whose recent decisions are 50 of the longest URLs
// the traffic log keeps (2 KiB) and whose selected ticket has a 8 KiB URL: what wrapping costs
// a redraw (at most ten a second under traffic).
func BenchmarkViewLongURLs(b *testing.B) {
	t := &testing.T{}
	s := newSetup(t)
	s.size = [2]int{80, 24}
	tl := traffic.NewLog(0)
	s.cfg.Traffic = tl
	ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/" + strings.Repeat("t", 8<<10)})
	var es []traffic.Entry
	for i := range 50 {
		es = append(es, traffic.Entry{Time: s.clk.Now().Add(time.Duration(i) * time.Second), ID: fmt.Sprint("r-", i), Container: "agent",
			Method: "GET", URL: "https://registry.example.com/" + strings.Repeat("u", 2<<10), Verdict: "FREE", Status: 200})
	}
	tl.Add(traffic.Batch{Entries: es})
	r := lipgloss.NewRenderer(nil)
	r.SetColorProfile(termenv.ANSI)
	m := newModel(s.cfg, r)
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	m.refresh()
	m.refreshTraffic()
	b.ResetTimer()
	for range b.N {
		_ = m.View()
	}
}
