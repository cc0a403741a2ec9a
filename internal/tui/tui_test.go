package tui

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
	"github.com/skip2/go-qrcode"

	"github.com/lockhttp/lockhttp/internal/display/displaytest"
	"github.com/lockhttp/lockhttp/internal/fingerprint"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// newClock returns the tests' clock, shared by the hub and the UI.
func newClock() *testkit.Clock { return testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

func newHub(t *testing.T, clk *testkit.Clock) *hub.Hub {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := hub.New(hub.Config{Key: key, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var fpCount int

// ask creates a pending ticket; fields of req left empty get defaults.
func ask(t *testing.T, h *hub.Hub, req hub.AskRequest) hub.Ticket {
	t.Helper()
	if req.Kind == "" {
		req.Kind = hub.KindRequest
	}
	if req.Container == "" {
		req.Container = "dev"
	}
	if req.Method == "" {
		req.Method = "POST"
	}
	if req.Fingerprint == "" {
		fpCount++
		req.Fingerprint = fmt.Sprintf("%s%x", fingerprint.Prefix, sha256.Sum256([]byte(strconv.Itoa(fpCount))))
	}
	if req.Rule == "" {
		req.Rule = "ask-writes"
	}
	ans, err := h.Ask(req)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Outcome != hub.OutcomePending {
		t.Fatalf("ask %s: outcome %s, want pending", req.URL, ans.Outcome)
	}
	return ans.Ticket
}

// driver runs the model as a bubbletea program would, on the test's goroutine: Update and View
// are called only here; commands run on goroutines and send their messages back.
type driver struct {
	t    *testing.T
	m    *model
	msgs chan tea.Msg
	done chan struct{}
}

type setup struct {
	clk  *testkit.Clock
	hub  *hub.Hub
	cfg  Config
	size [2]int
	// profile is the colour profile of the renderer; zero: Ascii (no escape sequences at all).
	profile termenv.Profile
}

func newSetup(t *testing.T) *setup {
	clk := newClock()
	h := newHub(t, clk)
	return &setup{clk: clk, hub: h, cfg: Config{Hub: h, User: "alice", Now: clk.Now}, size: [2]int{120, 50},
		profile: termenv.Ascii}
}

func (s *setup) start(t *testing.T) *driver {
	t.Helper()
	r := lipgloss.NewRenderer(nil)
	r.SetColorProfile(s.profile)
	m := newModel(s.cfg, r)
	m.tickEvery = time.Hour // only hub events refresh the screen, so that the tests see them do it
	d := &driver{t: t, m: m, msgs: make(chan tea.Msg, 64), done: make(chan struct{})}
	t.Cleanup(func() {
		m.stop()
		close(d.done)
	})
	d.send(tea.WindowSizeMsg{Width: s.size[0], Height: s.size[1]})
	d.run(m.Init())
	return d
}

func (d *driver) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		d.deliver(cmd())
	}()
}

func (d *driver) deliver(msg tea.Msg) {
	switch msg := msg.(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			d.run(c)
		}
	default:
		select {
		case d.msgs <- msg:
		case <-d.done:
		}
	}
}

func (d *driver) send(msg tea.Msg) {
	_, cmd := d.m.Update(msg)
	d.run(cmd)
}

// key presses one key: "enter", "esc", "ctrl+c", "up", "down", or a rune.
func (d *driver) key(k string) {
	switch k {
	case "enter":
		d.send(tea.KeyMsg{Type: tea.KeyEnter})
	case "esc":
		d.send(tea.KeyMsg{Type: tea.KeyEsc})
	case "ctrl+c":
		d.send(tea.KeyMsg{Type: tea.KeyCtrlC})
	case "up":
		d.send(tea.KeyMsg{Type: tea.KeyUp})
	case "down":
		d.send(tea.KeyMsg{Type: tea.KeyDown})
	default:
		d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)})
	}
}

// typeText presses the keys of s one by one.
func (d *driver) typeText(s string) {
	for _, r := range s {
		d.key(string(r))
	}
}

func (d *driver) view() string { return d.m.View() }

// waitFor handles messages until cond holds.
func (d *driver) waitFor(what string, cond func() bool) {
	d.t.Helper()
	deadline := time.After(5 * time.Second)
	for !cond() {
		select {
		case msg := <-d.msgs:
			d.send(msg)
		case <-deadline:
			d.t.Fatalf("timed out waiting for %s; the screen:\n%s", what, d.view())
		}
	}
}

// waitView handles messages until the screen shows s.
func (d *driver) waitView(s string) {
	d.t.Helper()
	d.waitFor(fmt.Sprintf("%q on the screen", s), func() bool { return shows(d.view(), s) })
}

// shows reports whether the screen v shows s, on one line or wrapped over several.
func shows(v, s string) bool {
	flat := func(s string) string { return strings.Join(strings.Fields(ansi.Strip(s)), " ") }
	return strings.Contains(v, s) || strings.Contains(flat(v), flat(s))
}

// settle lets the selection's guard time pass.
func (s *setup) settle() { s.clk.Advance(2 * settle) }

func status(t *testing.T, h *hub.Hub, id string) hub.Ticket {
	t.Helper()
	got, ok := h.Get(id)
	if !ok {
		t.Fatalf("ticket %s is gone", id)
	}
	return got
}

func TestLiveUpdateThenApprove(t *testing.T) {
	s := newSetup(t)
	d := s.start(t)
	if !strings.Contains(d.view(), "0 pending") {
		t.Fatalf("empty hub: want 0 pending; got\n%s", d.view())
	}
	tk := ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/v1/upload", Rule: "ask-uploads"})
	d.waitView("https://api.example.com/v1/upload") // no key pressed: the subscription brought it
	v := d.view()
	for _, want := range []string{"1 pending", "dev", "POST", "ask-uploads"} {
		if !strings.Contains(v, want) {
			t.Errorf("list: want %q; got\n%s", want, v)
		}
	}
	s.settle()
	d.key("y")
	got := status(t, s.hub, tk.ID)
	if got.Status != hub.Approved || got.Decision == nil || got.Decision.By != "terminal:alice" {
		t.Fatalf("after y: status %s decision %+v; want approved by terminal:alice", got.Status, got.Decision)
	}
	d.waitFor("the list to empty", func() bool { return len(d.m.pending) == 0 })
	v = d.view()
	if !strings.Contains(v, "0 pending") || !strings.Contains(v, "approved") {
		t.Fatalf("after approval: want 0 pending and a recent approval; got\n%s", v)
	}
}

func TestDeny(t *testing.T) {
	tests := []struct {
		name       string
		keys       []string // after n
		wantStatus hub.Status
		wantReason string
		wantView   string
	}{
		{name: "reason then enter", keys: []string{"no uploads today", "enter"}, wantStatus: hub.Denied,
			wantReason: "no uploads today", wantView: "denied"},
		{name: "esc cancels", keys: []string{"not sure", "esc"}, wantStatus: hub.Pending, wantView: "not denied"},
		{name: "empty reason is refused", keys: []string{"enter"}, wantStatus: hub.Pending,
			wantView: "a denial needs a reason"},
		{name: "blank reason is refused", keys: []string{"   ", "enter"}, wantStatus: hub.Pending,
			wantView: "a denial needs a reason"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			tk := ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/upload"})
			d := s.start(t)
			s.settle()
			d.key("n")
			if !strings.Contains(d.view(), "reason:") {
				t.Fatalf("n: want the reason prompt; got\n%s", d.view())
			}
			for _, k := range tc.keys {
				switch k {
				case "enter", "esc":
					d.key(k)
				default:
					d.typeText(k)
				}
			}
			got := status(t, s.hub, tk.ID)
			if got.Status != tc.wantStatus {
				t.Fatalf("status %s, want %s", got.Status, tc.wantStatus)
			}
			if tc.wantStatus == hub.Denied && (got.Decision.Reason != tc.wantReason || got.Decision.By != "terminal:alice") {
				t.Fatalf("decision %+v; want reason %q by terminal:alice", got.Decision, tc.wantReason)
			}
			if !strings.Contains(d.view(), tc.wantView) {
				t.Fatalf("want %q on the screen; got\n%s", tc.wantView, d.view())
			}
		})
	}
}

// The prompt keeps the ticket it was opened for, whatever the list does meanwhile.
func TestDenyPromptKeepsItsTicket(t *testing.T) {
	s := newSetup(t)
	first := ask(t, s.hub, hub.AskRequest{URL: "https://a.example.com/"})
	d := s.start(t)
	s.settle()
	d.key("n")
	second := ask(t, s.hub, hub.AskRequest{URL: "https://b.example.com/"})
	d.waitView("https://b.example.com/")
	d.typeText("nope")
	d.key("enter")
	if got := status(t, s.hub, first.ID); got.Status != hub.Denied {
		t.Errorf("the ticket n was pressed on: %s, want denied", got.Status)
	}
	if got := status(t, s.hub, second.ID); got.Status != hub.Pending {
		t.Errorf("the ticket that arrived meanwhile: %s, want pending", got.Status)
	}
}

func TestDecidedElsewhere(t *testing.T) {
	tests := []struct {
		name string
		// stale changes the hub or the screen under the UI; it returns the error the UI must show.
		stale func(t *testing.T, s *setup, d *driver, tk hub.Ticket) error
		key   string
	}{
		{name: "approved on the phone, then y", key: "y", stale: func(t *testing.T, s *setup, d *driver, tk hub.Ticket) error {
			if _, err := s.hub.Decide(tk.ID, tk.Fingerprint, true, "phone:pixel", ""); err != nil {
				t.Fatal(err)
			}
			return hub.ErrDecided
		}},
		{name: "denied on the phone, then n with a reason", key: "n", stale: func(t *testing.T, s *setup, d *driver, tk hub.Ticket) error {
			if _, err := s.hub.Decide(tk.ID, tk.Fingerprint, false, "phone:pixel", "no"); err != nil {
				t.Fatal(err)
			}
			return hub.ErrDecided
		}},
		{name: "the screen shows another fingerprint", key: "y", stale: func(t *testing.T, s *setup, d *driver, tk hub.Ticket) error {
			d.m.pending[0].Fingerprint = fingerprint.Prefix + strings.Repeat("e", 64)
			return hub.ErrFingerprint
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			tk := ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/upload"})
			d := s.start(t)
			s.settle()
			before := status(t, s.hub, tk.ID)
			// No message is handled between the change and the key: the screen is stale.
			wantErr := tc.stale(t, s, d, tk)
			before = status(t, s.hub, tk.ID)
			d.key(tc.key)
			if tc.key == "n" {
				d.typeText("too late")
				d.key("enter")
			}
			after := status(t, s.hub, tk.ID)
			if after.Status != before.Status || fmt.Sprint(after.Decision) != fmt.Sprint(before.Decision) {
				t.Fatalf("the ticket changed: before %s %+v, after %s %+v", before.Status, before.Decision, after.Status, after.Decision)
			}
			if v := d.view(); !shows(v, wantErr.Error()) {
				t.Fatalf("want the hub's error %q; got\n%s", wantErr, v)
			}
		})
	}
}

// A key meant for a ticket that just left does not decide the one that took its place.
func TestSelectionMovedRefusesOnce(t *testing.T) {
	s := newSetup(t)
	older := ask(t, s.hub, hub.AskRequest{URL: "https://older.example.com/"})
	s.clk.Advance(time.Second)
	newer := ask(t, s.hub, hub.AskRequest{URL: "https://newer.example.com/"})
	d := s.start(t)
	s.settle()
	if d.m.selected != newer.ID {
		t.Fatalf("selected %s, want the newest %s", d.m.selected, newer.ID)
	}
	if _, err := s.hub.Decide(newer.ID, newer.Fingerprint, true, "phone:pixel", ""); err != nil {
		t.Fatal(err)
	}
	d.waitFor("the selection to move", func() bool { return d.m.selected == older.ID })
	d.key("y")
	if got := status(t, s.hub, older.ID); got.Status != hub.Pending {
		t.Fatalf("y right after the selection moved: %s, want pending", got.Status)
	}
	if v := d.view(); !strings.Contains(v, "the selection just moved") {
		t.Fatalf("want the selection message; got\n%s", v)
	}
	d.key("y")
	if got := status(t, s.hub, older.ID); got.Status != hub.Approved {
		t.Fatalf("y again: %s, want approved", got.Status)
	}
}

func TestNewestFirst(t *testing.T) {
	s := newSetup(t)
	d := s.start(t)
	var urls []string
	for i := range 3 {
		u := fmt.Sprintf("https://api.example.com/ticket-%d", i)
		ask(t, s.hub, hub.AskRequest{URL: u})
		urls = append(urls, u)
		s.clk.Advance(time.Second)
	}
	d.waitFor("three tickets", func() bool { return len(d.m.pending) == 3 })
	v := d.view()
	i0, i1, i2 := strings.Index(v, urls[0]), strings.Index(v, urls[1]), strings.Index(v, urls[2])
	if i0 < 0 || i1 < 0 || i2 < 0 || !(i2 < i1 && i1 < i0) {
		t.Fatalf("want ticket-2, ticket-1, ticket-0 from the top; got\n%s", v)
	}
}

func TestDetail(t *testing.T) {
	s := newSetup(t)
	tk := ask(t, s.hub, hub.AskRequest{
		URL:         "https://api.github.com/repos/x/y/git/refs",
		Agent:       "claude",
		Headers:     []hub.Header{{Name: "Authorization", Value: "Bearer ***"}, {Name: "Content-Type", Value: "application/json"}},
		BodyPreview: `{"ref":"refs/heads/main"}`,
		BodySize:    25,
		Rule:        "gh-push",
		Reason:      "pushes to GitHub ask",
		Warning:     "this pushes code to a public repository",
	})
	s.clk.Advance(time.Second)
	conn := ask(t, s.hub, hub.AskRequest{Kind: hub.KindConnect, Method: "CONNECT", URL: "example.org:443",
		Host: "example.org", Port: 443, Grant: 10 * time.Minute, Rule: "unknown-host"})
	d := s.start(t)
	s.settle()

	v := d.view()
	if !strings.Contains(v, "[tunnel]") {
		t.Errorf("list: want the CONNECT marked as a tunnel; got\n%s", v)
	}

	d.key("down") // the older one: tk
	d.key("enter")
	v = d.view()
	for _, want := range []string{
		"Ticket " + tk.ID,
		"WARNING: this pushes code to a public repository",
		"Authorization: Bearer ***",
		"Content-Type: application/json",
		`{"ref":"refs/heads/main"}`,
		"25 bytes",
		"gh-push",
		"pushes to GitHub ask",
		"claude",
		fingerprint.Short(tk.Fingerprint),
		fmt.Sprintf("(in %s)", tk.Expires.Sub(s.clk.Now())),
		"1 request(s) held now",
		"https://api.github.com/repos/x/y/git/refs",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("detail: want %q; got\n%s", want, v)
		}
	}
	// The warning is above the fields.
	if strings.Index(v, "WARNING") > strings.Index(v, "container") {
		t.Errorf("detail: the warning comes after the fields; got\n%s", v)
	}
	s.clk.Advance(70 * time.Second)
	d.send(tickMsg{})
	if want := fmt.Sprintf("(in %s)", tk.Expires.Sub(s.clk.Now())); !strings.Contains(d.view(), want) {
		t.Errorf("detail: want the countdown to move to %s; got\n%s", want, d.view())
	}

	d.key("esc")
	d.key("up")
	d.key("enter")
	v = d.view()
	if !strings.Contains(v, "reads and writes both pass, unseen") || !strings.Contains(v, "example.org:443") ||
		!strings.Contains(v, "10m0s") {
		t.Errorf("CONNECT detail: want the tunnel warning; got\n%s", v)
	}
	d.key("y")
	if got := status(t, s.hub, conn.ID); got.Status != hub.Approved {
		t.Fatalf("y in the detail view: %s, want approved", got.Status)
	}
	if d.m.screen != screenList {
		t.Errorf("after deciding in the detail view: want the list")
	}
}

// A ticket decided elsewhere while its detail is open says so, and y does nothing.
func TestDetailOfDecidedTicket(t *testing.T) {
	s := newSetup(t)
	tk := ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/x"})
	d := s.start(t)
	s.settle()
	d.key("enter")
	if _, err := s.hub.Decide(tk.ID, tk.Fingerprint, false, "cli:root", "no"); err != nil {
		t.Fatal(err)
	}
	d.waitView("no longer pending: denied by cli:root")
	d.key("y")
	if got := status(t, s.hub, tk.ID); got.Status != hub.Denied || got.Decision.By != "cli:root" {
		t.Fatalf("y on a decided ticket changed it: %s %+v", got.Status, got.Decision)
	}
	if v := d.view(); !strings.Contains(v, "nothing to decide") {
		t.Fatalf("want \"nothing to decide\"; got\n%s", v)
	}
}

func TestHostileTicketRendersEscaped(t *testing.T) {
	hostile := hub.AskRequest{
		URL:         "http://x.example.com/\x1b[2J\u202egnp.exe\x07",
		Container:   "dev\x1b]0;pwned\x07",
		Headers:     []hub.Header{{Name: "X-Evil\r", Value: "a\x1b[31mred\u2066b\x00c\u009b1m\x9b"}},
		BodyPreview: "line1\nline2\x1b[H\u202e\U000E0041\xff",
		Rule:        "ask\x1b[5m",
		Reason:      "why\u200b",
		Warning:     "warn\x1b[0m",
	}
	forbidden := []string{"\x1b", "\a", "\r", "\x00", "\u202e", "\u2066", "\u200b", "\U000E0041", "\u009b", "\xff"}
	for _, p := range []termenv.Profile{termenv.Ascii, termenv.TrueColor} {
		t.Run(map[termenv.Profile]string{termenv.Ascii: "ascii", termenv.TrueColor: "truecolor"}[p], func(t *testing.T) {
			s := newSetup(t)
			s.profile = p
			ask(t, s.hub, hostile)
			d := s.start(t)
			s.settle()
			check := func(where string, wantVisible ...string) {
				t.Helper()
				v := d.view()
				if !utf8.ValidString(v) {
					t.Errorf("%s: the screen is not UTF-8: %q", where, v)
				}
				for _, f := range forbidden {
					if f == "\x1b" && p != termenv.Ascii {
						// Our own colours are escape sequences: look for the ticket's.
						for _, seq := range []string{"\x1b[2J", "\x1b]0;", "\x1b[H", "\x1b[5m", "\x1b[31mred"} {
							if strings.Contains(v, seq) {
								t.Errorf("%s: the ticket's %q reached the screen", where, seq)
							}
						}
						continue
					}
					if strings.Contains(v, f) {
						t.Errorf("%s: %q reached the screen raw", where, f)
					}
				}
				for _, w := range wantVisible {
					if !strings.Contains(ansi.Strip(v), w) {
						t.Errorf("%s: want the visible escape %q; got\n%s", where, w, v)
					}
				}
			}
			check("list", `\x1b[2J\u{202E}gnp.exe\x07`, `dev\x1b]0;p`)
			d.key("enter")
			check("detail", `\x1b[2J\u{202E}gnp.exe\x07`, `X-Evil\x0d: a\x1b[31mred\u{2066}b\x00c\x9b1m\x9b`,
				`line2\x1b[H\u{202E}\u{E0041}\xff`, `ask\x1b[5m`, `why\u{200B}`, `warn\x1b[0m`, `dev\x1b]0;pwned\x07`,
				"control, invisible or look-alike characters")
		})
	}
}

// TestHostileFieldsAsOnThePhone: a ticket whose URL, header, reason and decision hold the
// hostile texts of displaytest shows each as displaytest says, which the phone page's test
// checks too.
func TestHostileFieldsAsOnThePhone(t *testing.T) {
	s := newSetup(t)
	s.size[0] = 200 // the recent line holds the URL and the reason
	tk := ask(t, s.hub, hub.AskRequest{URL: displaytest.URL.Raw, Reason: displaytest.Reason.Raw,
		Headers: []hub.Header{{Name: "X-Note", Value: displaytest.Header.Raw}},
		MCP:     &hub.MCPCall{Server: "files", Method: "tools/call", Tool: displaytest.Header.Raw, Arguments: "{\n  \"path\": \"" + displaytest.Reason.Raw + "\"\n}"}})
	d := s.start(t)
	s.settle()
	noRaw := func(where, v string) {
		t.Helper()
		for _, raw := range displaytest.Raw {
			if strings.Contains(v, raw) {
				t.Errorf("%s: %q reached the screen raw", where, raw)
			}
		}
	}
	d.key("enter")
	v := d.view()
	for _, want := range []string{displaytest.URL.Shown, "X-Note: " + displaytest.Header.Shown, displaytest.Reason.Shown, "look-alike",
		"MCP call", "tool", displaytest.Header.Shown, `"path": "` + displaytest.Reason.Shown + `"`} {
		if !shows(v, want) {
			t.Errorf("detail: want %q; got\n%s", want, v)
		}
	}
	noRaw("detail", v)

	// A reason typed at the prompt is recorded clean, and shown escaped among the recent
	// decisions.
	d.key("n")
	d.typeText(displaytest.Typed.Raw)
	d.key("enter")
	if got := status(t, s.hub, tk.ID); got.Decision == nil || got.Decision.Reason != displaytest.Typed.Clean {
		t.Fatalf("decision %+v; want the reason %q", got.Decision, displaytest.Typed.Clean)
	}
	d.waitFor("the decision", func() bool { return len(d.m.recent) == 1 })
	v = d.view()
	if !shows(v, displaytest.Typed.Shown) {
		t.Errorf("recent: want %q; got\n%s", displaytest.Typed.Shown, v)
	}
	noRaw("recent", v)
}

func TestRecentAndGateState(t *testing.T) {
	s := newSetup(t)
	a := ask(t, s.hub, hub.AskRequest{URL: "https://approved.example.com/"})
	b := ask(t, s.hub, hub.AskRequest{URL: "https://denied.example.com/"})
	ask(t, s.hub, hub.AskRequest{URL: "https://expired.example.com/"})
	d := s.start(t)
	if v := d.view(); !strings.Contains(v, "gate not reporting") {
		t.Fatalf("no report yet: want \"gate not reporting\"; got\n%s", v)
	}
	if _, err := s.hub.Decide(a.ID, a.Fingerprint, true, "phone:pixel", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.hub.Decide(b.ID, b.Fingerprint, false, "cli:root", "not now"); err != nil {
		t.Fatal(err)
	}
	s.clk.Advance(hub.DefaultTicketTTL + time.Second)
	s.hub.Expire()
	s.hub.SetGateState(hub.GateState{PolicyVersion: "sha256:0123456789abcdef0123", Signer: "ok", Audit: "disk full"})
	d.waitFor("the decisions and the gate's state", func() bool { return len(d.m.recent) == 3 && !d.m.gate.Reported.IsZero() })
	v := d.view()
	for _, want := range []string{
		"approved  phone:pixel", "https://approved.example.com/",
		"denied    cli:root", "https://denied.example.com/", "not now",
		"expired   -", "https://expired.example.com/",
		"policy 0123456789ab", "signer ok", "audit disk full", "gate ok", "0 pending",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("want %q; got\n%s", want, v)
		}
	}
	if strings.Contains(v, "gate not reporting") {
		t.Errorf("the gate just reported; got\n%s", v)
	}
	s.clk.Advance(staleGate + time.Second)
	d.send(tickMsg{})
	if v := d.view(); !strings.Contains(v, "gate not reporting (last 16s ago)") {
		t.Errorf("16 s later: want \"gate not reporting\"; got\n%s", v)
	}
}

func TestRecentColours(t *testing.T) {
	s := newSetup(t)
	s.profile = termenv.ANSI
	a := ask(t, s.hub, hub.AskRequest{URL: "https://approved.example.com/"})
	b := ask(t, s.hub, hub.AskRequest{URL: "https://denied.example.com/"})
	s.hub.Decide(a.ID, a.Fingerprint, true, "phone:pixel", "")
	s.hub.Decide(b.ID, b.Fingerprint, false, "phone:pixel", "no")
	d := s.start(t)
	v := d.view()
	for _, want := range []string{"\x1b[32mapproved", "\x1b[31mdenied"} {
		if !strings.Contains(v, want) {
			t.Errorf("want %q; got %q", want, v)
		}
	}
}

func TestStatusLines(t *testing.T) {
	s := newSetup(t)
	s.cfg.Status = func() []string { return []string{"policy: file differs from the approved policy\x1b[2J"} }
	d := s.start(t)
	v := d.view()
	if !strings.Contains(v, `policy: file differs from the approved policy\x1b[2J`) {
		t.Fatalf("want the status line, escaped; got\n%s", v)
	}
	if strings.Index(v, "policy: file differs") > strings.Index(v, "Pending tickets") {
		t.Fatalf("the status line goes under the header, above the list; got\n%s", v)
	}
}

func TestCommands(t *testing.T) {
	long := strings.Repeat("a line of the review\n", 10)
	tests := []struct {
		name     string
		line     string
		want     string
		wantPage bool
	}{
		{name: "config command", line: "echo hello world", want: "echo: hello world"},
		{name: "leading colon typed twice", line: ":echo twice", want: "echo: twice"},
		{name: "error", line: "fail", want: ":fail: the policy file does not parse; fix it and run :review again"},
		{name: "long output opens a page", line: "review", want: "a line of the review", wantPage: true},
		{name: "unknown", line: "nope", want: "unknown command :nope; the commands are :q, :q!, :help, :echo, :evil, :fail, :review"},
		{name: "output is escaped", line: "evil", want: `owned\x1b[2J\u{202E}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			var gotArgs []string
			s.cfg.Commands = map[string]func([]string) (string, error){
				"echo": func(args []string) (string, error) {
					gotArgs = args
					return "echo: " + strings.Join(args, " "), nil
				},
				"fail": func([]string) (string, error) {
					return "", errors.New("the policy file does not parse; fix it and run :review again")
				},
				"review": func([]string) (string, error) { return long, nil },
				"evil":   func([]string) (string, error) { return "owned\x1b[2J\u202e", nil },
			}
			d := s.start(t)
			d.key(":")
			d.typeText(tc.line)
			d.key("enter")
			d.waitView(tc.want)
			if tc.wantPage != (d.m.overlay == overlayOutput) {
				t.Errorf("output page shown: %v, want %v", d.m.overlay == overlayOutput, tc.wantPage)
			}
			if tc.name == "config command" && strings.Join(gotArgs, "|") != "hello|world" {
				t.Errorf("args %q, want [hello world]", gotArgs)
			}
		})
	}
}

func TestQuit(t *testing.T) {
	tests := []struct {
		name     string
		pending  bool
		keys     []string
		wantQuit bool
	}{
		{name: "q with nothing pending", keys: []string{"q"}, wantQuit: true},
		{name: ":q with nothing pending", keys: []string{":", "q", "enter"}, wantQuit: true},
		{name: "ctrl+c with nothing pending", keys: []string{"ctrl+c"}, wantQuit: true},
		{name: "q with a ticket pending asks", pending: true, keys: []string{"q"}, wantQuit: false},
		{name: "q then y quits", pending: true, keys: []string{"q", "y"}, wantQuit: true},
		{name: "q then n stays", pending: true, keys: []string{"q", "n"}, wantQuit: false},
		{name: "ctrl+c twice quits", pending: true, keys: []string{"ctrl+c", "ctrl+c"}, wantQuit: true},
		{name: ":q asks too", pending: true, keys: []string{":", "q", "enter"}, wantQuit: false},
		{name: ":q! does not ask", pending: true, keys: []string{":", "q", "!", "enter"}, wantQuit: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			var tk hub.Ticket
			if tc.pending {
				tk = ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/"})
			}
			d := s.start(t)
			s.settle()
			var last tea.Cmd
			for _, k := range tc.keys {
				_, last = d.m.Update(keyMsg(k))
			}
			quit := last != nil && isQuit(last())
			if quit != tc.wantQuit || d.m.quitting != tc.wantQuit {
				t.Fatalf("quit %v (quitting %v), want %v; screen:\n%s", quit, d.m.quitting, tc.wantQuit, d.view())
			}
			if tc.pending {
				if got := status(t, s.hub, tk.ID); got.Status != hub.Pending {
					t.Fatalf("quitting decided the ticket: %s", got.Status)
				}
			}
		})
	}
}

func keyMsg(k string) tea.KeyMsg {
	switch k {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func isQuit(msg tea.Msg) bool {
	_, ok := msg.(tea.QuitMsg)
	return ok
}

func TestPairing(t *testing.T) {
	const url = "https://console.example.net:8443/pair#k=3b1f0c9a"
	s := newSetup(t)
	s.cfg.PairingURL = func() (string, error) { return url, nil }
	d := s.start(t)
	d.key("p")
	d.waitView(url)
	q, err := qrcode.New(url, qrcode.Medium)
	if err != nil {
		t.Fatal(err)
	}
	v := d.view()
	for _, line := range strings.Split(strings.TrimRight(q.ToSmallString(false), "\n"), "\n") {
		if !strings.Contains(v, line) {
			t.Fatalf("the QR code is not on the screen whole (missing %q); got\n%s", line, v)
		}
	}
	d.key("p")
	if strings.Contains(d.view(), "█") {
		t.Fatalf("p again hides the QR code; got\n%s", d.view())
	}

	t.Run("not enabled", func(t *testing.T) {
		s := newSetup(t)
		d := s.start(t)
		d.key("p")
		if v := d.view(); !strings.Contains(v, "phone page not enabled") {
			t.Fatalf("want \"phone page not enabled\"; got\n%s", v)
		}
	})
	t.Run("error", func(t *testing.T) {
		s := newSetup(t)
		s.cfg.PairingURL = func() (string, error) { return "", errors.New("the hub's phone listener is down") }
		d := s.start(t)
		d.key("p")
		d.waitView("phone pairing: the hub's phone listener is down")
	})
	t.Run("small terminal", func(t *testing.T) {
		s := newSetup(t)
		s.size = [2]int{40, 15}
		s.cfg.PairingURL = func() (string, error) { return url, nil }
		d := s.start(t)
		d.key("p")
		d.waitFor("the QR page", func() bool { return d.m.overlay == overlayQR })
		if !strings.Contains(d.view(), "too small") {
			t.Fatalf("want \"too small\"; got\n%s", d.view())
		}
		if !strings.Contains(strings.ReplaceAll(d.view(), "\n", ""), url) {
			t.Fatalf("a small terminal still shows the URL; got\n%s", d.view())
		}
	})
}

// The hub drops a subscriber that falls behind; the UI subscribes again and rereads.
func TestResubscribe(t *testing.T) {
	s := newSetup(t)
	d := s.start(t)
	for i := range 2100 { // more than the subscription's buffer, with nobody handling messages
		ask(t, s.hub, hub.AskRequest{URL: fmt.Sprintf("https://flood.example.com/%d", i)})
	}
	d.waitFor("a second subscription", func() bool { return d.m.gen == 2 })
	if len(d.m.pending) != 2100 {
		t.Fatalf("after the reread: %d pending, want 2100", len(d.m.pending))
	}
	s.clk.Advance(time.Second)
	after := ask(t, s.hub, hub.AskRequest{URL: "https://after.example.com/"})
	d.waitFor("the ticket asked after the new subscription", func() bool {
		return len(d.m.pending) == 2101 && d.m.pending[0].ID == after.ID
	})
}

func TestHelp(t *testing.T) {
	s := newSetup(t)
	ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/"})
	d := s.start(t)
	s.settle()
	d.key("?")
	v := d.view()
	for _, want := range []string{"approve this ticket", "deny this ticket", ":q", "Nothing approves more than one ticket"} {
		if !shows(v, want) {
			t.Errorf("help: want %q; got\n%s", want, v)
		}
	}
	d.key("y") // on the help page y decides nothing
	if len(s.hub.Pending()) != 1 {
		t.Fatalf("y on the help page decided a ticket")
	}
	d.key("esc")
	if d.m.overlay != overlayNone {
		t.Fatalf("esc closes the help")
	}
}

// Pasted text is not a key press.
func TestPasteDecidesNothing(t *testing.T) {
	s := newSetup(t)
	ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/"})
	d := s.start(t)
	s.settle()
	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("y"), Paste: true})
	if len(s.hub.Pending()) != 1 {
		t.Fatalf("a pasted y approved a ticket")
	}
}

func TestSmallTerminals(t *testing.T) {
	s := newSetup(t)
	s.cfg.Status = func() []string { return []string{"status one", "status two", "status three"} }
	s.cfg.PairingURL = func() (string, error) { return "https://console.example.net/pair#k=1", nil }
	for i := range 5 {
		ask(t, s.hub, hub.AskRequest{URL: fmt.Sprintf("https://api.example.com/%d/%s", i, strings.Repeat("x", 100)),
			Headers: []hub.Header{{Name: "A", Value: strings.Repeat("v", 300)}}, BodyPreview: strings.Repeat("b\n", 50),
			Warning: "a long warning " + strings.Repeat("w", 80), Red: i == 2})
	}
	d := s.start(t)
	s.settle()
	screens := []struct {
		name string
		keys []string
	}{
		{"list", nil}, {"detail", []string{"enter"}}, {"detail scrolled", []string{"enter", "down", "down", "down"}},
		{"deny prompt", []string{"n"}}, {"command prompt", []string{":"}}, {"help", []string{"?"}},
		{"quit prompt", []string{"q"}}, {"qr", []string{"p"}},
	}
	sizes := [][2]int{{20, 10}, {1, 1}, {0, 0}, {5, 3}, {20, 2}, {200, 10}, {10, 80}}
	for _, sc := range screens {
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%s %dx%d", sc.name, size[0], size[1]), func(t *testing.T) {
				d.m.screen, d.m.prompt, d.m.overlay, d.m.scroll = screenList, promptNone, overlayNone, 0
				d.send(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
				for _, k := range sc.keys {
					d.key(k)
				}
				if sc.name == "qr" {
					d.waitFor("the QR page", func() bool { return d.m.overlay == overlayQR })
				}
				v := d.view()
				w, h := size[0], size[1]
				if w == 0 {
					w, h = defaultWidth, defaultHeight
				}
				lines := strings.Split(v, "\n")
				if len(lines) > h {
					t.Errorf("%d lines, want at most %d", len(lines), h)
				}
				for _, l := range lines {
					if ansi.StringWidth(l) > w {
						t.Errorf("line %q is %d wide, want at most %d", l, ansi.StringWidth(l), w)
					}
				}
			})
		}
	}
}

// A container that hits max_pending is named on the terminal: its new asks are refused until
// the human answers some.
func TestAskLimitShown(t *testing.T) {
	s := newSetup(t)
	d := s.start(t)
	ask(t, s.hub, hub.AskRequest{Method: "POST", URL: "https://example.com/1", Fingerprint: "fp1:1", MaxPending: 1})
	if a, err := s.hub.Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "dev", Method: "POST", URL: "https://example.com/2", Rule: "r", Fingerprint: "fp1:2", MaxPending: 1}); err != nil || a.Outcome != hub.OutcomeLimit {
		t.Fatalf("a second ask: %v %v", a.Outcome, err)
	}
	d.waitView("has 1 requests waiting for a human (max_pending)")
}

// TestRedrawKey: ctrl+l (and r) redraw the whole screen, so a terminal attached after the UI
// started (docker attach console) shows the UI at once.
func TestRedrawKey(t *testing.T) {
	d := newSetup(t).start(t)
	for _, k := range []tea.KeyMsg{{Type: tea.KeyCtrlL}, {Type: tea.KeyRunes, Runes: []rune("r")}} {
		_, cmd := d.m.Update(k)
		if cmd == nil {
			t.Fatalf("%s: no command", k)
		}
		if got, want := fmt.Sprintf("%T", cmd()), fmt.Sprintf("%T", tea.ClearScreen()); got != want {
			t.Errorf("%s: %s, want %s (a full redraw)", k, got, want)
		}
	}
}

// A ticket whose request a gate restart cut says so in the list and the detail; approving it
// says that nothing was waiting and what the approval stands for.
func TestTicketWithItsRequestCut(t *testing.T) {
	s := newSetup(t)
	tk := ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/v1/cut"})
	s.hub.LeaveCut(tk.ID)
	d := s.start(t)
	s.settle()
	if v := d.view(); !shows(v, "[cut by restart]") || !strings.Contains(v, "0 held") {
		t.Fatalf("list: want the ticket marked cut; got\n%s", v)
	}
	d.key("enter")
	if v := d.view(); !shows(v, "Nothing is waiting on this ticket now (the gate restarted while its request was held") ||
		!shows(v, "Approving it lets one identical retry of the request through within 10 minutes of the approval") {
		t.Fatalf("detail: want the ticket to say its request is gone; got\n%s", v)
	}
	d.key("y")
	if got := status(t, s.hub, tk.ID); got.Status != hub.Approved {
		t.Fatalf("after y: %s", got.Status)
	}
	if v := d.view(); !shows(v, "Nothing was waiting on this ticket when it was approved") ||
		!shows(v, "lets one identical retry of the request through until 12:10:") {
		t.Fatalf("after the approval: want what it stands for; got\n%s", v)
	}
}
