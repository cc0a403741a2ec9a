// Package tui is the console's terminal UI: it shows the hub's pending ASK tickets live and lets
// the person at the terminal approve or deny them, one ticket and one key press at a time.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/skip2/go-qrcode"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// Config is what the UI needs.
type Config struct {
	// Hub holds the tickets. Required.
	Hub *hub.Hub
	// Traffic is the gate's decisions as they happen (FREE and DENY ones too), shown with the
	// humans' decisions under the tickets. Nil: the humans' decisions only.
	Traffic *traffic.Log
	// Restarts returns lox's restarts of the stack's processes, the latest first: the header
	// counts them and the recent decisions show each, whatever the filter (an operator must
	// see them). Nil: none (a console that lox does not supervise).
	Restarts func() []restarts.Report
	// CACert is the path of the CA certificate agents trust (lox run's ca.pem), shown in the
	// header beside the proxy's address. Empty: the header names no CA.
	CACert string
	// User is the person at this terminal; decisions are made as "terminal:<User>", the name
	// as hub.CleanName leaves it. Empty: decisions are made as "terminal".
	User string
	// PairingURL returns the phone page's pairing URL, shown as a QR code on p. Nil: the phone
	// page is not enabled.
	PairingURL func() (string, error)
	// Commands are the commands of the command line (":name args…") besides the built-in ones
	// (q, q!, help), which they cannot replace. A command runs off the UI's goroutine; its output
	// is shown as plain text (control characters escaped). Nil: only the built-in ones.
	Commands map[string]func(args []string) (string, error)
	// Status returns lines drawn under the header (the console's own state), asked at every
	// refresh (each second and on each hub event). Nil: none.
	Status func() []string
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Tunables.
const (
	// staleGate is how old the gate's last report may be before the header says it is not
	// reporting.
	staleGate = 15 * time.Second
	// settle is how long y and n are refused after the selection moved by itself (the selected
	// ticket was decided elsewhere or expired, or a ticket arrived in an empty list): a key
	// pressed for the ticket that left must not decide the one that took its place.
	settle = time.Second
	// recentShown is how many decisions the hub is asked for.
	recentShown = 50
	// reasonLimit bounds a denial's reason (the agent is told it).
	reasonLimit = 300
	// urlLines is how many lines at most the selected ticket's URL, or one recent decision,
	// wraps over in the list; past them it ends in "…" (a ticket's details show all of it).
	urlLines = 4
	// shortOutput is how many lines of a command's output the message area shows; longer
	// output opens a page of its own.
	shortOutput = 2
	// trafficEvery is how often at most the gate's traffic redraws the screen: under load a
	// redraw per request would take the terminal.
	trafficEvery = 100 * time.Millisecond
)

// Run runs the UI on in and out until ctx ends or the user quits; it returns nil in both cases
// (the caller tells them apart by ctx.Err()) and an error when the terminal fails. The caller
// keeps its signal handling: ctrl+c in the UI is a key, and SIGINT/SIGTERM are not caught here.
func Run(ctx context.Context, c Config, in io.Reader, out io.Writer) error {
	if c.Hub == nil {
		return errors.New("tui: no hub; pass the console's *hub.Hub in Config.Hub")
	}
	m := newModel(c, lipgloss.NewRenderer(out))
	defer m.stop()
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out), tea.WithAltScreen(),
		tea.WithoutSignalHandler())
	if _, err := p.Run(); err != nil {
		if ctx.Err() != nil && errors.Is(err, tea.ErrProgramKilled) {
			return nil
		}
		return fmt.Errorf("tui: %w", err)
	}
	return nil
}

// New returns the UI as a bubbletea model, for tests and for hosting it in another program. Its
// Init subscribes to the hub; the subscription ends when the user quits. Config.Hub is required.
func New(c Config) tea.Model {
	return newModel(c, lipgloss.DefaultRenderer())
}

type screen int

const (
	screenList screen = iota
	screenDetail
)

type prompt int

const (
	promptNone    prompt = iota
	promptDeny           // the reason of a denial
	promptCommand        // ":" command line
	promptQuit           // "tickets are pending: quit?"
)

type overlay int

const (
	overlayNone overlay = iota
	overlayHelp
	overlayQR
	overlayOutput // a command's long output
)

// Messages.
type (
	eventMsg struct {
		gen    int
		closed bool // the hub dropped the subscription: subscribe again and reread
		// limits are the containers that hit max_pending in the burst.
		limits []hub.Limit
	}
	tickMsg    struct{}
	trafficMsg struct {
		gen    int
		closed bool
	}
	trafficWaitMsg struct{ gen int } // the redraw's pause is over: wait for more traffic
	pairingMsg     struct {
		url string
		err error
	}
	commandMsg struct {
		name string
		out  string
		err  error
	}
)

// model is the UI's state. It is used through a pointer: Update changes it in place.
type model struct {
	hub      *hub.Hub
	by       string
	pairing  func() (string, error)
	commands map[string]func([]string) (string, error)
	status   func() []string
	restarts func() []restarts.Report
	caCert   string // escaped
	now      func() time.Time
	st       styles
	keys     keyMap
	// tickEvery is how often the screen refreshes on its own (ages, countdowns, the gate's
	// staleness); events refresh it at once.
	tickEvery time.Duration

	// The hub subscription.
	events      <-chan hub.Event
	unsubscribe func()
	gen         int // counts subscriptions; messages of an older one are ignored

	// The gate's traffic and its subscription.
	traffic     *traffic.Log
	trafficCh   <-chan struct{}
	trafficStop func()
	trafficGen  int

	// What the hub said at the last refresh.
	pending     []hub.Ticket // newest first
	recent      []hub.Ticket
	gate        hub.GateState
	statusLines []string
	entries     []traffic.Entry   // the gate's latest decisions that filter shows, newest first
	restarted   []restarts.Report // lox's restarts, the latest first
	dropped     int               // the gate's decisions it could not send
	sampled     int               // forwarded requests the gate left out of the live view

	filter traffic.Filter // of the recent decisions: all, refused, asks

	selected string    // id of the selected pending ticket; "" when there is none
	movedAt  time.Time // when the selection last moved by itself; zero once a key chose it

	screen screen
	detail hub.Ticket // the ticket the detail view shows, as displayed
	scroll int        // of the detail view

	prompt prompt
	input  textinput.Model
	denyOf hub.Ticket // the ticket the reason prompt is for, as it was displayed when n was pressed

	overlay   overlay
	qr        string
	qrURL     string
	output    []string
	outTitle  string
	outScroll int

	msg    string
	msgErr bool

	width, height int
	quitting      bool
}

func newModel(c Config, r *lipgloss.Renderer) *model {
	m := &model{
		hub: c.Hub, traffic: c.Traffic, by: byOf(c.User), pairing: c.PairingURL, commands: c.Commands, status: c.Status, restarts: c.Restarts, now: c.Now,
		caCert: display.Escape(c.CACert, false), st: newStyles(r), keys: newKeyMap(), tickEvery: time.Second,
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.input = textinput.New()
	m.input.PromptStyle = r.NewStyle().Bold(true)
	m.input.TextStyle = r.NewStyle()
	m.input.PlaceholderStyle = r.NewStyle().Faint(true)
	return m
}

// byOf is the "by" of the terminal's decisions.
func byOf(user string) string {
	if n := hub.CleanName(user); n != "" {
		return "terminal:" + n
	}
	return "terminal"
}

// Init subscribes to the hub and reads what it holds.
func (m *model) Init() tea.Cmd {
	if m.hub == nil {
		m.setErr("no hub: the console passes its hub to the terminal UI (tui.Config.Hub)")
		return nil
	}
	return tea.Batch(m.subscribe(), m.subscribeTraffic(), m.tick(), textinput.Blink)
}

// subscribeTraffic follows the gate's traffic, when there is a log of it.
func (m *model) subscribeTraffic() tea.Cmd {
	if m.traffic == nil {
		return nil
	}
	if m.trafficStop != nil {
		m.trafficStop()
	}
	m.trafficCh, m.trafficStop = m.traffic.Subscribe()
	m.trafficGen++
	m.refreshTraffic()
	return m.waitTraffic()
}

// waitTraffic waits for the next entries of the gate's traffic.
func (m *model) waitTraffic() tea.Cmd {
	ch, gen := m.trafficCh, m.trafficGen
	return func() tea.Msg {
		_, ok := <-ch
		return trafficMsg{gen: gen, closed: !ok}
	}
}

// refreshTraffic rereads the gate's traffic through the filter.
func (m *model) refreshTraffic() {
	if m.traffic == nil {
		return
	}
	m.entries = m.traffic.Recent(recentShown, m.filter)
	m.dropped, m.sampled = m.traffic.Dropped(), m.traffic.Sampled()
}

// subscribe (again) and reread: Subscribe first, so that nothing between the read and the
// subscription is lost.
func (m *model) subscribe() tea.Cmd {
	if m.unsubscribe != nil {
		m.unsubscribe()
	}
	m.events, m.unsubscribe = m.hub.Subscribe()
	m.gen++
	m.refresh()
	return m.wait()
}

// wait waits for the next events of the subscription; a burst of events is one message.
func (m *model) wait() tea.Cmd {
	ch, gen := m.events, m.gen
	return func() tea.Msg {
		ev, ok := <-ch
		if !ok {
			return eventMsg{gen: gen, closed: true}
		}
		msg := eventMsg{gen: gen}
		for {
			if ev.Type == "limit" && ev.Limit != nil && len(msg.limits) < 8 {
				msg.limits = append(msg.limits, *ev.Limit)
			}
			select {
			case ev, ok = <-ch:
				if !ok {
					return eventMsg{gen: gen, closed: true}
				}
			default:
				return msg
			}
		}
	}
}

func (m *model) tick() tea.Cmd {
	return tea.Tick(m.tickEvery, func(time.Time) tea.Msg { return tickMsg{} })
}

// stop ends the subscription.
func (m *model) stop() {
	m.quitting = true
	if m.unsubscribe != nil {
		m.unsubscribe()
		m.unsubscribe = nil
	}
	if m.trafficStop != nil {
		m.trafficStop()
		m.trafficStop = nil
	}
}

func (m *model) quit() tea.Cmd {
	m.stop()
	return tea.Quit
}

// refresh rereads the hub and keeps the selection on the same ticket.
func (m *model) refresh() {
	if m.hub == nil {
		return
	}
	old := m.pending
	m.pending = m.hub.Pending()
	// Newest first, as the hub answers; tickets of the same instant keep one order across refreshes.
	sort.Slice(m.pending, func(i, j int) bool {
		a, b := m.pending[i], m.pending[j]
		if !a.Created.Equal(b.Created) {
			return a.Created.After(b.Created)
		}
		return a.ID < b.ID
	})
	m.recent = m.hub.Recent(recentShown)
	m.refreshTraffic()
	m.gate = m.hub.GateState()
	if m.status != nil {
		m.statusLines = m.status()
	}
	if m.restarts != nil {
		m.restarted = m.restarts()
	}
	if m.indexOf(m.selected) < 0 && len(m.pending) > 0 {
		// The selected ticket left (or there was none): select the one in its place, and refuse
		// y and n for a moment.
		i := 0
		for j, t := range old {
			if t.ID == m.selected {
				i = min(j, len(m.pending)-1)
			}
		}
		m.selected = m.pending[i].ID
		m.movedAt = m.now()
	} else if len(m.pending) == 0 {
		m.selected = ""
	}
	if m.screen == screenDetail {
		if i := m.indexOf(m.detail.ID); i >= 0 {
			m.detail = m.pending[i]
		} else if t, ok := m.hub.Get(m.detail.ID); ok {
			m.detail = t
		} else {
			m.detail.Status = ""
		}
	}
}

func (m *model) indexOf(id string) int {
	if id == "" {
		return -1
	}
	for i, t := range m.pending {
		if t.ID == id {
			return i
		}
	}
	return -1
}

func (m *model) setMsg(format string, args ...any) {
	m.msg, m.msgErr = fmt.Sprintf(format, args...), false
}

func (m *model) setErr(format string, args ...any) {
	m.msg, m.msgErr = fmt.Sprintf(format, args...), true
}

// Update handles one message.
func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, nil
	case eventMsg:
		if m.quitting || msg.gen != m.gen {
			return m, nil
		}
		if msg.closed {
			return m, m.subscribe()
		}
		for _, l := range msg.limits {
			m.setErr("%s has %d requests waiting for a human (max_pending): its new asks are refused E_ASK_LIMIT until you answer some",
				display.Escape(l.Container, false), l.Pending)
		}
		m.refresh()
		return m, m.wait()
	case tickMsg:
		if m.quitting {
			return m, nil
		}
		m.refresh()
		return m, m.tick()
	case trafficMsg:
		if m.quitting || msg.gen != m.trafficGen || msg.closed {
			return m, nil
		}
		m.refreshTraffic()
		gen := m.trafficGen
		return m, tea.Tick(trafficEvery, func(time.Time) tea.Msg { return trafficWaitMsg{gen: gen} })
	case trafficWaitMsg:
		if m.quitting || msg.gen != m.trafficGen {
			return m, nil
		}
		return m, m.waitTraffic()
	case pairingMsg:
		m.showPairing(msg.url, msg.err)
		return m, nil
	case commandMsg:
		m.showOutput(msg.name, msg.out, msg.err)
		return m, nil
	case tea.KeyMsg:
		return m, m.key(msg)
	}
	if m.prompt == promptDeny || m.prompt == promptCommand {
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg) // the cursor's blink
		return m, cmd
	}
	return m, nil
}

func (m *model) key(msg tea.KeyMsg) tea.Cmd {
	if m.prompt == promptDeny || m.prompt == promptCommand {
		return m.promptKey(msg)
	}
	if msg.Type == tea.KeyRunes && len(msg.Runes) > 1 && !msg.Paste {
		return m.burst(msg)
	}
	if msg.Paste {
		return nil // pasted text is not a key press: it decides nothing
	}
	if m.prompt == promptQuit {
		m.prompt = promptNone
		if msg.String() == "y" || key.Matches(msg, m.keys.ForceQuit) {
			return m.quit()
		}
		m.setMsg("not quitting")
		return nil
	}
	if key.Matches(msg, m.keys.ForceQuit) {
		return m.askQuit()
	}
	if m.overlay != overlayNone {
		return m.overlayKey(msg)
	}
	switch {
	case key.Matches(msg, m.keys.Quit):
		return m.askQuit()
	case key.Matches(msg, m.keys.Help):
		m.overlay = overlayHelp
	case key.Matches(msg, m.keys.Command):
		m.openPrompt(promptCommand, ":", "q to quit, help for the list")
		return textinput.Blink
	case key.Matches(msg, m.keys.Pair):
		return m.pair()
	case key.Matches(msg, m.keys.Refresh):
		// A full redraw, not only the lines that changed: a terminal attached after the UI
		// started (docker attach) shows nothing the UI drew before.
		m.refresh()
		m.setMsg("reread the hub")
		return tea.ClearScreen
	case key.Matches(msg, m.keys.Filter):
		m.filter = m.filter.Next()
		m.refreshTraffic()
		m.setMsg("recent decisions: %s (f for %s)", m.filter, m.filter.Next())
	case key.Matches(msg, m.keys.Approve):
		return m.decide(true)
	case key.Matches(msg, m.keys.Deny):
		return m.decide(false)
	case m.screen == screenDetail:
		m.detailKey(msg)
	default:
		m.listKey(msg)
	}
	return nil
}

// burst handles keys typed faster than the terminal is read (a paste without bracketed paste, a
// slow ssh link, tmux send-keys): the terminal delivers them as one message of several runes, and
// each is its own key press, in order. The first may open a prompt, which then takes the rest as
// text (":review" runs the command). Each press is judged as if typed alone: a second y, after an
// approval moved the selection, is refused like any key pressed just after a move.
func (m *model) burst(msg tea.KeyMsg) tea.Cmd {
	var cmds []tea.Cmd
	for i, r := range msg.Runes {
		if m.prompt == promptDeny || m.prompt == promptCommand {
			rest := msg
			rest.Runes = msg.Runes[i:]
			return tea.Batch(append(cmds, m.promptKey(rest))...)
		}
		cmds = append(cmds, m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: msg.Alt}))
		if m.quitting {
			break
		}
	}
	return tea.Batch(cmds...)
}

func (m *model) listKey(msg tea.KeyMsg) {
	i := m.indexOf(m.selected)
	page := max(1, m.bodyRows()-6)
	switch {
	case key.Matches(msg, m.keys.Up):
		i--
	case key.Matches(msg, m.keys.Down):
		i++
	case key.Matches(msg, m.keys.PageUp):
		i -= page
	case key.Matches(msg, m.keys.PageDown):
		i += page
	case key.Matches(msg, m.keys.Top):
		i = 0
	case key.Matches(msg, m.keys.Bottom):
		i = len(m.pending) - 1
	case key.Matches(msg, m.keys.Open):
		if i < 0 {
			m.setMsg("no pending ticket")
			return
		}
		m.screen, m.detail, m.scroll = screenDetail, m.pending[i], 0
		m.movedAt = time.Time{} // the person looked at it
		return
	default:
		return
	}
	if len(m.pending) == 0 {
		return
	}
	i = max(0, min(i, len(m.pending)-1))
	m.selected = m.pending[i].ID
	m.movedAt = time.Time{}
}

func (m *model) detailKey(msg tea.KeyMsg) {
	switch {
	case key.Matches(msg, m.keys.Back):
		m.screen = screenList
	case key.Matches(msg, m.keys.Up):
		m.scroll--
	case key.Matches(msg, m.keys.Down):
		m.scroll++
	case key.Matches(msg, m.keys.PageUp):
		m.scroll -= max(1, m.height/2)
	case key.Matches(msg, m.keys.PageDown):
		m.scroll += max(1, m.height/2)
	case key.Matches(msg, m.keys.Top):
		m.scroll = 0
	}
	m.scroll = max(0, min(m.scroll, m.detailScrollMax()))
}

func (m *model) overlayKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case m.overlay == overlayOutput && key.Matches(msg, m.keys.Up):
		m.outScroll = max(0, m.outScroll-1)
	case m.overlay == overlayOutput && key.Matches(msg, m.keys.Down):
		m.outScroll++
	case m.overlay == overlayOutput && key.Matches(msg, m.keys.PageUp):
		m.outScroll = max(0, m.outScroll-max(1, m.height/2))
	case m.overlay == overlayOutput && key.Matches(msg, m.keys.PageDown):
		m.outScroll += max(1, m.height/2)
	case key.Matches(msg, m.keys.Back, m.keys.Quit, m.keys.Help, m.keys.Pair, m.keys.Open):
		m.overlay = overlayNone
	default:
		m.setMsg("esc closes this page first")
	}
	return nil
}

// target is the ticket y and n act on: the one in the detail view, or the selected one.
func (m *model) target() (hub.Ticket, bool) {
	if m.screen == screenDetail {
		if m.detail.Status != hub.Pending {
			m.setErr("%s is %s: nothing to decide", display.Escape(m.detail.ID, false), m.detailState())
			return hub.Ticket{}, false
		}
		return m.detail, true
	}
	i := m.indexOf(m.selected)
	if i < 0 {
		m.setMsg("no pending ticket")
		return hub.Ticket{}, false
	}
	t := m.pending[i]
	if !m.movedAt.IsZero() && m.now().Sub(m.movedAt) < settle {
		m.movedAt = time.Time{}
		e := t.Escaped()
		m.setErr("the selection just moved to %s %s %s: look at it, then press the key again",
			e.ID, e.Method, ansi.Truncate(e.URL, 60, "…"))
		return hub.Ticket{}, false
	}
	return t, true
}

// decide approves the target ticket, or opens the prompt for a denial's reason.
func (m *model) decide(approve bool) tea.Cmd {
	t, ok := m.target()
	if !ok {
		return nil
	}
	if !approve {
		m.denyOf = t
		m.openPrompt(promptDeny, "deny "+display.Escape(t.ID, false)+": reason: ", "told to the agent; enter denies, esc cancels")
		return textinput.Blink
	}
	if t.Kind == hub.KindRule {
		// A rule an agent asks for is not applied by an approval: the console takes it into the
		// policy file and opens :review on its diff (the console's :rule command).
		return m.run(":rule take " + t.ID + " " + t.Fingerprint)
	}
	m.record(t, true, "")
	return nil
}

// record takes the decision to the hub with the fingerprint of the ticket as displayed. An error
// is shown; there is no retry with another fingerprint.
func (m *model) record(t hub.Ticket, approve bool, reason string) {
	verb := map[bool]string{true: "approve", false: "deny"}[approve]
	got, err := m.hub.Decide(t.ID, t.Fingerprint, approve, m.by, reason)
	if err != nil {
		m.setErr("could not %s %s: %s", verb, display.Escape(t.ID, false), cleanLine(err.Error()))
		m.refresh()
		return
	}
	m.hub.FlushNow()
	e := t.Escaped()
	m.setMsg("%s %s %s %s (as %s)", got.Status, e.ID, e.Method, ansi.Truncate(e.URL, 80, "…"), display.Escape(m.by, false))
	if w := got.Escaped().Waiting; w != "" {
		m.msg += "\n" + w
	}
	if m.screen == screenDetail && m.detail.ID == t.ID {
		m.screen = screenList
	}
	m.refresh()
}

func (m *model) openPrompt(p prompt, label, placeholder string) {
	m.prompt = p
	m.input.Reset()
	m.input.Prompt = label
	m.input.Placeholder = placeholder
	m.input.CharLimit = 0
	if p == promptDeny {
		m.input.CharLimit = reasonLimit
	}
	m.input.Width = max(10, m.viewWidth()-lipgloss.Width(label)-2)
	m.input.Focus()
}

func (m *model) closePrompt() {
	m.prompt = promptNone
	m.input.Blur()
	m.input.Reset()
}

func (m *model) promptKey(msg tea.KeyMsg) tea.Cmd {
	switch msg.Type {
	case tea.KeyEsc:
		if m.prompt == promptDeny {
			m.setMsg("not denied: %s is still pending", display.Escape(m.denyOf.ID, false))
		}
		m.closePrompt()
		return nil
	case tea.KeyCtrlC:
		m.closePrompt()
		return m.askQuit()
	case tea.KeyEnter:
		if msg.Paste {
			break // a pasted line break submits nothing
		}
		value := m.input.Value()
		if m.prompt == promptDeny {
			reason := display.Clean(value)
			if reason == "" {
				m.setErr("a denial needs a reason: the agent is told it (esc cancels)")
				return nil
			}
			t := m.denyOf
			m.closePrompt()
			m.record(t, false, reason)
			return nil
		}
		m.closePrompt()
		return m.run(value)
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

// run runs a command line.
func (m *model) run(line string) tea.Cmd {
	fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), ":"))
	if len(fields) == 0 {
		return nil
	}
	name, args := fields[0], fields[1:]
	switch name {
	case "q", "quit":
		return m.askQuit()
	case "q!", "quit!":
		return m.quit()
	case "help", "h":
		m.overlay = overlayHelp
		return nil
	}
	f, ok := m.commands[name]
	if !ok || f == nil {
		m.setErr("unknown command :%s; the commands are %s", display.Escape(name, false), strings.Join(m.commandNames(), ", "))
		return nil
	}
	m.setMsg(":%s …", display.Escape(name, false))
	return func() tea.Msg {
		out, err := f(args)
		return commandMsg{name: name, out: out, err: err}
	}
}

func (m *model) commandNames() []string {
	names := []string{":q", ":q!", ":help"}
	var extra []string
	for n, f := range m.commands {
		if f != nil && n != "q" && n != "quit" && n != "q!" && n != "quit!" && n != "help" && n != "h" {
			extra = append(extra, ":"+display.Escape(n, false))
		}
	}
	sort.Strings(extra)
	return append(names, extra...)
}

// showOutput shows a command's answer: short in the message area, long on a page of its own.
func (m *model) showOutput(name, out string, err error) {
	if err != nil {
		m.setErr(":%s: %s", display.Escape(name, false), cleanLine(err.Error()))
		return
	}
	name = display.Escape(name, false)
	lines := strings.Split(strings.TrimRight(display.Escape(out, true), "\n"), "\n")
	switch {
	case len(lines) == 1 && lines[0] == "":
		m.setMsg(":%s: done", name)
	case len(lines) <= shortOutput:
		m.setMsg("%s", strings.Join(lines, "\n"))
	default:
		m.overlay, m.output, m.outTitle, m.outScroll = overlayOutput, lines, ":"+name, 0
		m.setMsg(":%s: %d lines (esc closes)", name, len(lines))
	}
}

// askQuit quits, after asking when tickets are pending.
func (m *model) askQuit() tea.Cmd {
	if len(m.pending) == 0 {
		return m.quit()
	}
	m.prompt = promptQuit
	return nil
}

// pair asks for the pairing URL (or hides the QR code).
func (m *model) pair() tea.Cmd {
	if m.pairing == nil {
		m.setErr("phone page not enabled")
		return nil
	}
	m.setMsg("asking for the pairing URL …")
	f := m.pairing
	return func() tea.Msg {
		url, err := f()
		return pairingMsg{url: url, err: err}
	}
}

func (m *model) showPairing(url string, err error) {
	if err != nil {
		m.setErr("phone pairing: %s", cleanLine(err.Error()))
		return
	}
	q, err := qrcode.New(url, qrcode.Medium)
	if err != nil {
		m.setErr("phone pairing: cannot draw the QR code: %s; open %s on the phone", cleanLine(err.Error()), display.Escape(url, false))
		return
	}
	m.qr, m.qrURL, m.overlay = q.ToSmallString(false), url, overlayQR
	m.setMsg("scan the code with the phone; p or esc hides it")
}

// detailState says where the detail view's ticket stands, when it is no longer pending.
func (m *model) detailState() string {
	t := m.detail
	switch {
	case t.Status == "":
		return "gone from the hub"
	case t.Decision != nil:
		return fmt.Sprintf("%s by %s at %s", t.Status, display.Escape(t.Decision.By, false), t.Decision.At.Format("15:04:05"))
	}
	return string(t.Status)
}

// cleanLine is a message of possibly several lines (an error, a status line) made one and
// escaped.
func cleanLine(s string) string {
	return display.Escape(strings.ReplaceAll(strings.TrimSpace(s), "\n", " "), false)
}
