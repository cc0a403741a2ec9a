package tui

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/fingerprint"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/phone"
	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// The size assumed until the terminal reports its own.
const (
	defaultWidth  = 80
	defaultHeight = 24
	// maxMsgLines bounds the message area.
	maxMsgLines = 4
)

type styles struct {
	title, faint, label          lipgloss.Style
	ok, warn, bad                lipgloss.Style
	sel, red, redSel, tunnel     lipgloss.Style
	approved, denied, expired    lipgloss.Style
	warning, status, msg, msgErr lipgloss.Style
	key                          lipgloss.Style
}

func newStyles(r *lipgloss.Renderer) styles {
	red, green, yellow, grey, magenta := lipgloss.Color("1"), lipgloss.Color("2"), lipgloss.Color("3"),
		lipgloss.Color("245"), lipgloss.Color("5")
	return styles{
		title:    r.NewStyle().Bold(true),
		faint:    r.NewStyle().Faint(true),
		label:    r.NewStyle().Foreground(grey),
		ok:       r.NewStyle().Foreground(green),
		warn:     r.NewStyle().Foreground(yellow),
		bad:      r.NewStyle().Foreground(red).Bold(true),
		sel:      r.NewStyle().Reverse(true).Bold(true),
		red:      r.NewStyle().Foreground(red),
		redSel:   r.NewStyle().Foreground(red).Reverse(true).Bold(true),
		tunnel:   r.NewStyle().Foreground(magenta).Bold(true),
		approved: r.NewStyle().Foreground(green),
		denied:   r.NewStyle().Foreground(red),
		expired:  r.NewStyle().Foreground(grey),
		warning:  r.NewStyle().Foreground(red).Bold(true),
		status:   r.NewStyle().Foreground(yellow),
		msg:      r.NewStyle(),
		msgErr:   r.NewStyle().Foreground(red),
		key:      r.NewStyle().Bold(true),
	}
}

func (m *model) viewWidth() int {
	if m.width > 0 {
		return m.width
	}
	return defaultWidth
}

func (m *model) viewHeight() int {
	if m.height > 0 {
		return m.height
	}
	return defaultHeight
}

// View draws the screen: the header and the status lines, the body (the ticket list and the
// recent decisions, a ticket's details, or a page: help, QR code, a command's output), and at
// the bottom the message, the prompt and the keys. Every string that came from a ticket, the
// gate or a hook is escaped first (display.Escape; a ticket and the gate's state through their
// Escaped methods), so that no control sequence reaches the terminal.
func (m *model) View() string {
	if m.quitting {
		return ""
	}
	w, h := m.viewWidth(), m.viewHeight()
	top, bottom, rows := m.frame(w, h)
	var body []string
	switch {
	case m.overlay == overlayHelp:
		body = m.helpBody(w)
	case m.overlay == overlayQR:
		body = m.qrBody(w, rows)
	case m.overlay == overlayOutput:
		body = m.outputBody(w, rows)
	case m.screen == screenDetail:
		body = m.detailBody(w, rows)
	default:
		body = m.listBody(w, rows)
	}
	lines := make([]string, 0, h)
	lines = append(lines, top...)
	for i := range rows {
		if i < len(body) {
			lines = append(lines, body[i])
		} else {
			lines = append(lines, "")
		}
	}
	lines = append(lines, bottom...)
	if len(lines) > h {
		lines = lines[:h]
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, w, "…")
	}
	return strings.Join(lines, "\n")
}

// frame lays the screen out: the lines above and below the body, and the body's rows. When the
// terminal is short, the prompt stays longest, then the message, then the keys; the header stays
// above them all.
func (m *model) frame(w, h int) (top, bottom []string, rows int) {
	msg, prompt, keys := m.bottomParts()
	budget := max(0, h-1)
	take := func(lines []string) []string {
		n := min(len(lines), budget)
		budget -= n
		return lines[len(lines)-n:]
	}
	prompt = take(prompt)
	msg = take(msg)
	keys = take(keys)
	bottom = append(append(append(bottom, msg...), prompt...), keys...)
	top = []string{m.headerLine(w)}
	room := h - len(bottom) - len(top)
	if where := m.whereLines(w); len(where) <= room {
		top = append(top, where...)
		room -= len(where)
	}
	room -= 3 // leave three rows to the body where possible
	for _, s := range m.statusLines {
		if room <= 0 {
			break
		}
		top = append(top, m.st.status.Render(cleanLine(s)))
		room--
	}
	rows = max(0, h-len(top)-len(bottom))
	return top, bottom, rows
}

func (m *model) bodyRows() int {
	_, _, rows := m.frame(m.viewWidth(), m.viewHeight())
	return rows
}

// headerLine is the counts and the gate's state at a glance.
func (m *model) headerLine(w int) string {
	now, g, st := m.now(), m.gate.Escaped(), m.st
	held, reds := 0, 0
	for _, t := range m.pending {
		held += t.Holders
		if t.Red {
			reds++
		}
	}
	count := fmt.Sprintf("%d pending", len(m.pending))
	if len(m.pending) > 0 {
		count = st.title.Render(count)
	}
	if reds > 0 {
		count += " " + st.red.Render(fmt.Sprintf("(%d red)", reds))
	}
	count += fmt.Sprintf(" · %d held", held)

	var parts []string
	stale := g.Reported.IsZero() || now.Sub(g.Reported) > staleGate
	if stale {
		s := "gate not reporting"
		if !g.Reported.IsZero() {
			s += " (last " + fmtAge(now.Sub(g.Reported)) + " ago)"
		}
		parts = append(parts, st.bad.Render(s))
	}
	if !g.Reported.IsZero() {
		var gs []string
		v := strings.TrimPrefix(g.PolicyVersion, "sha256:")
		if len(v) > 12 {
			v = v[:12]
		}
		if v == "" {
			gs = append(gs, st.bad.Render("no policy"))
		} else {
			gs = append(gs, "policy "+v)
		}
		gs = append(gs, "signer "+m.health(g.Signer, "off"), "audit "+m.health(g.Audit, ""))
		if !stale {
			gs = append(gs, st.ok.Render("gate ok"))
			gs = append(gs, m.budgetParts(g.Budgets)...)
		} else {
			for i := range gs {
				gs[i] = st.faint.Render(ansi.Strip(gs[i]))
			}
		}
		parts = append(parts, gs...)
	}
	if r := m.restartsPart(); r != "" {
		parts = append(parts, r)
	}
	return st.title.Render("lockhttp") + " │ " + count + " │ " + strings.Join(parts, " · ")
}

// whereLines are the header's second part: the proxy's address (as the gate reports it) and the
// CA certificate agents trust, what a person starting an agent by hand sets it up with. They
// wrap rather than lose their end.
func (m *model) whereLines(w int) []string {
	proxy := "proxy " + m.st.warn.Render("? (the gate has not reported its address yet)")
	if l := m.gate.Escaped().Listen; l != "" {
		proxy = "proxy " + m.st.title.Render("http://"+l)
	}
	if m.caCert == "" {
		return strings.Split(ansi.Hardwrap(proxy, max(1, w), true), "\n")
	}
	ca := "CA " + m.st.title.Render(m.caCert)
	if one := proxy + " · " + ca; ansi.StringWidth(one) <= w {
		return []string{one}
	}
	// One a line, so that a path is broken only where it is wider than the terminal.
	return append(strings.Split(ansi.Hardwrap(proxy, max(1, w), true), "\n"),
		strings.Split(ansi.Hardwrap(ca, max(1, w), true), "\n")...)
}

// restartsPart is the header's word on lox's restarts: how often each process was restarted
// since the stack started (from the latest report), in red while the latest is under a minute
// old or lox gave up; "" when none was.
func (m *model) restartsPart() string {
	if len(m.restarted) == 0 {
		return ""
	}
	last := m.restarted[0]
	var ps []string
	for _, p := range restarts.Processes {
		if n := last.Totals[p]; n > 0 {
			ps = append(ps, fmt.Sprintf("%s %d", p, n))
		}
	}
	s := "restarted " + strings.Join(ps, ", ")
	if last.Stopped {
		s = display.Escape(last.Process, false) + " keeps exiting: stopping"
	}
	s += " (last " + last.Exited.In(m.now().Location()).Format("15:04:05") + ")"
	if last.Stopped || m.now().Sub(last.Exited) < restarts.Window {
		return m.st.bad.Render(s)
	}
	return m.st.warn.Render(s)
}

// health colours one of the gate's "ok" / error fields, escaped already.
func (m *model) health(s, neutral string) string {
	switch {
	case s == "ok":
		return m.st.ok.Render("ok")
	case s == "":
		return m.st.warn.Render("?")
	case s == neutral:
		return m.st.warn.Render(s)
	}
	return m.st.bad.Render(ansi.Truncate(s, 40, "…"))
}

// bottomParts are the message, the prompt and the keys.
func (m *model) bottomParts() (msg, prompt, keys []string) {
	if m.msg != "" {
		style := m.st.msg
		if m.msgErr {
			style = m.st.msgErr
		}
		for _, l := range strings.Split(m.msg, "\n") {
			msg = append(msg, wrapStyled(style, l, m.viewWidth())...)
		}
		if len(msg) > maxMsgLines {
			msg = append(msg[:maxMsgLines-1], style.Render("… (longer than the screen)"))
		}
	}
	switch m.prompt {
	case promptDeny, promptCommand:
		prompt = []string{m.input.View()}
	case promptQuit:
		prompt = []string{m.st.bad.Render(fmt.Sprintf(
			"Quit? %d tickets stay pending and their requests keep waiting (y quits)",
			len(m.pending)))}
	}
	return msg, prompt, []string{m.footer()}
}

func (m *model) footer() string {
	k := func(key, what string) string { return m.st.key.Render(key) + " " + what }
	var parts []string
	switch {
	case m.prompt == promptDeny:
		parts = []string{k("enter", "deny"), k("esc", "cancel")}
	case m.prompt == promptCommand:
		parts = []string{k("enter", "run"), k("esc", "cancel")}
	case m.prompt == promptQuit:
		parts = []string{k("y", "quit"), k("any other key", "stay")}
	case m.overlay != overlayNone:
		parts = []string{k("esc", "close")}
		if m.overlay == overlayOutput {
			parts = append(parts, k("↑↓", "scroll"))
		}
	case m.screen == screenDetail:
		parts = []string{k("y", "approve"), k("n", "deny"), k("esc", "back"), k("↑↓", "scroll"), k("?", "help"), k("q", "quit")}
	default:
		parts = []string{k("y", "approve"), k("n", "deny"), k("enter", "details"), k("p", "phone"), k(":", "command"),
			k("?", "help"), k("q", "quit")}
		if m.traffic != nil {
			parts = append(parts[:5:5], append([]string{k("f", "filter")}, parts[5:]...)...)
		}
	}
	return strings.Join(parts, "  ")
}

// listBody is the pending tickets, newest first, and the recent decisions below them.
func (m *model) listBody(w, rows int) []string {
	if rows <= 0 {
		return nil
	}
	n := len(m.pending)
	sel := m.indexOf(m.selected)
	var selLines []string // the selected ticket, its URL whole
	if sel >= 0 {
		selLines = m.ticketLines(m.pending[sel], w, urlLines)
	}
	var recent [][]string // each decision's lines, as many as the body could show
	recentLines := 0
	for _, r := range m.recentRows() {
		if recentLines >= rows {
			break
		}
		var lines []string
		switch {
		case r.ticket != nil:
			head, tail := m.recentLine(*r.ticket)
			lines = wrapURL(head, tail, w, urlLines)
		case r.restart != nil:
			lines = []string{m.restartLine(*r.restart)}
		default:
			head, tail := m.trafficLine(*r.entry)
			lines = wrapURL(head, tail, w, urlLines)
		}
		recent = append(recent, lines)
		recentLines += len(lines)
	}
	pendingWant, recentWant := max(1, n)+max(0, len(selLines)-1), max(1, recentLines)
	reserve := 0 // rows kept for the recent decisions however many tickets are pending
	if rows >= 10 {
		reserve = 2 + min(recentWant, 3)
	}
	pendingRows := max(0, min(pendingWant, rows-1-reserve))
	recentRows := 0
	if left := rows - 1 - pendingRows; left >= 3 {
		recentRows = min(recentWant, left-2)
	}

	var out []string
	if len(selLines) > max(1, pendingRows) {
		selLines = m.ticketLines(m.pending[sel], w, max(1, pendingRows))
	}
	shown := pendingRows - max(0, len(selLines)-1) // tickets shown: the selected one's URL takes rows
	first := 0
	if shown > 0 && sel >= shown {
		first = sel - shown + 1
	}
	title := fmt.Sprintf("Pending tickets (%d)", n)
	if n > shown && shown > 0 {
		title += fmt.Sprintf(" · %d–%d shown", first+1, min(n, first+shown))
	}
	out = append(out, m.st.title.Render(title))
	if n == 0 && pendingRows > 0 {
		out = append(out, m.st.faint.Render("  none: requests the policy asks about appear here"))
	}
	for i := first; i < n && i < first+shown; i++ {
		if i == sel {
			out = append(out, selLines...)
		} else {
			out = append(out, m.ticketLine(m.pending[i], false, w))
		}
	}
	if recentRows > 0 {
		out = append(out, "", m.recentTitle())
		if len(recent) == 0 {
			out = append(out, m.st.faint.Render("  none yet"))
		}
		// A decision's lines are shown whole or not at all (the first one's at least).
		left := recentRows
		for i, lines := range recent {
			if len(lines) > left && i > 0 || left <= 0 {
				break
			}
			lines = lines[:min(len(lines), left)]
			out = append(out, lines...)
			left -= len(lines)
		}
	}
	return out
}

// recentRow is one line of the recent decisions: a human's decision (or an expiry) on a ticket,
// or a decision of the gate.
type recentRow struct {
	at      time.Time
	ticket  *hub.Ticket
	entry   *traffic.Entry
	restart *restarts.Report
}

// recentRows are the recent decisions the filter shows, latest first: the gate's (every request
// with all, the refused ones, the asked ones) and the humans' (with all and asks).
func (m *model) recentRows() []recentRow {
	var rows []recentRow
	if m.filter != traffic.Refused {
		for i := range m.recent {
			t := &m.recent[i]
			at := t.Expires
			if t.Decision != nil {
				at = t.Decision.At
			}
			rows = append(rows, recentRow{at: at, ticket: t})
		}
	}
	for i := range m.entries {
		rows = append(rows, recentRow{at: m.entries[i].Time, entry: &m.entries[i]})
	}
	for i := range m.restarted {
		rows = append(rows, recentRow{at: m.restarted[i].Exited, restart: &m.restarted[i]})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].at.After(rows[j].at) })
	return rows
}

// recentTitle names the recent decisions' filter, and the others f switches to.
func (m *model) recentTitle() string {
	title := m.st.title.Render("Recent decisions")
	if m.traffic == nil {
		return title
	}
	var fs []string
	for _, f := range traffic.Filters {
		if f == m.filter {
			fs = append(fs, m.st.title.Render("["+f.String()+"]"))
		} else {
			fs = append(fs, m.st.faint.Render(f.String()))
		}
	}
	title += "  " + strings.Join(fs, " ") + m.st.faint.Render("  (f)")
	if m.dropped > 0 {
		title += "  " + m.st.warn.Render(fmt.Sprintf("%d not shown: the gate could not send them (the audit has every one)", m.dropped))
	}
	if m.sampled > 0 {
		title += "  " + m.st.faint.Render(fmt.Sprintf("%d forwarded requests not shown: past %d a second only refusals and asks are (the audit has every one)", m.sampled, traffic.MaxForwardedPerSecond))
	}
	return title
}

// trafficLine is one decision of the gate: time, verdict, container, method, URL (the head), then
// the status or the refusal's code, the rule, the approver and the refusal's reason (the tail).
func (m *model) trafficLine(e traffic.Entry) (head, tail string) {
	x := func(s string) string { return display.Escape(s, false) }
	verdict, style := e.Verdict, m.st.msg
	switch {
	case e.Refused():
		style = m.st.denied
	case e.Verdict == "ASK":
		style = m.st.warn
	}
	if verdict == "" {
		verdict = "-"
	}
	who := x(e.Container)
	if who == "" {
		who = "-"
	}
	head = "  " + e.Time.In(m.now().Location()).Format("15:04:05") + "  " + style.Render(padRight(x(verdict), 8)) + "  " +
		padRight(ansi.Truncate(who, 20, "…"), 20) + "  " + padRight(ansi.Truncate(x(e.Method), 7, "…"), 7) + "  " + x(e.URL)
	more := []string{}
	if e.Refused() {
		tail = "  " + style.Render(x(e.Code))
	} else if e.Status != 0 {
		more = append(more, fmt.Sprint(e.Status))
	}
	if e.Rule != "" {
		more = append(more, x(e.Rule))
	}
	if e.Approver != "" {
		more = append(more, "by "+x(e.Approver))
	}
	if e.Refused() && e.Reason != "" {
		more = append(more, "— "+x(e.Reason))
	}
	if len(more) > 0 {
		tail += m.st.faint.Render("  " + strings.Join(more, " "))
	}
	return head, tail
}

// restartLine is one of lox's restarts: time, RESTART (or STOP when lox gave up), the process,
// how it exited, and what took its place.
func (m *model) restartLine(r restarts.Report) string {
	x := func(s string) string { return display.Escape(s, false) }
	verdict, then := "RESTART", fmt.Sprintf("restarted as pid %d (restart %d)", r.NewPID, r.Totals[r.Process])
	if r.Stopped {
		verdict, then = "STOP", fmt.Sprintf("exited %d times within %s: the stack stops", restarts.Limit, restarts.Window)
	}
	line := "  " + r.Exited.In(m.now().Location()).Format("15:04:05") + "  " + m.st.bad.Render(padRight(verdict, 8)) + "  " +
		padRight(ansi.Truncate(x(r.Process), 20, "…"), 20) + "  " + fmt.Sprintf("pid %d exited (%s); %s", r.PID, x(r.Exit), then)
	if r.Line != "" {
		line += m.st.faint.Render("  — " + x(r.Line))
	}
	return line
}

// ticketParts are the parts of a pending ticket's line (t escaped): mark, age, container and
// method; the tags ("[tunnel] " for a CONNECT, "[none held] " or "[cut by restart] " when no
// request waits on it); the URL (host:port for a CONNECT without one).
func (m *model) ticketParts(t hub.Ticket, selected bool) (left, tunnel, target string) {
	mark := "  "
	if selected {
		mark = "> "
	}
	if t.Red {
		mark += "!"
	} else {
		mark += " "
	}
	left = mark + padLeft(fmtAge(m.now().Sub(t.Created)), 4) + "  " + padRight(ansi.Truncate(t.Container, 12, "…"), 12) + "  " +
		padRight(ansi.Truncate(t.Method, 7, "…"), 7) + "  "
	target = t.URL
	if t.Kind == hub.KindConnect {
		tunnel = "[tunnel] "
		if target == "" {
			target = fmt.Sprintf("%s:%d", t.Host, t.Port)
		}
	}
	if t.Holders == 0 {
		// Nothing waits on it: an approval stands for one identical retry (the detail says so).
		switch t.Gone {
		case hub.GoneRestart:
			tunnel += "[cut by restart] "
		default:
			tunnel += "[none held] "
		}
	}
	return left, tunnel, target
}

// ticketLine is one pending ticket: age, container, method, URL, rule.
func (m *model) ticketLine(t hub.Ticket, selected bool, w int) string {
	t = t.Escaped()
	left, tunnel, target := m.ticketParts(t, selected)
	rest := max(0, w-ansi.StringWidth(left)-ansi.StringWidth(tunnel))
	rule := ""
	if r := t.Rule; r != "" && rest >= 30 {
		// The URL first: the rule has what it leaves, or a third when the URL does not fit.
		rule = "  " + ansi.Truncate(r, min(ansi.StringWidth(r), max(rest/3, rest-ansi.StringWidth(target)-2)), "…")
	}
	urlW := max(0, rest-ansi.StringWidth(rule))
	url := padRight(ansi.Truncate(target, urlW, "…"), urlW)
	switch {
	case selected && t.Red:
		return m.st.redSel.Render(left + tunnel + url + rule)
	case selected:
		return m.st.sel.Render(left + tunnel + url + rule)
	case t.Red:
		return m.st.red.Render(left + tunnel + url + rule)
	case tunnel != "":
		return left + m.st.tunnel.Render(tunnel) + url + m.st.faint.Render(rule)
	}
	return left + url + m.st.faint.Render(rule)
}

// ticketLines is the selected ticket: its line, and when its URL does not fit there, the rest
// of the URL on the lines below, aligned under it, at most maxLines in all (then it ends in "…";
// the details show all of it). What y approves is seen whole.
func (m *model) ticketLines(t hub.Ticket, w, maxLines int) []string {
	e := t.Escaped()
	left, tunnel, target := m.ticketParts(e, true)
	if ansi.StringWidth(left+tunnel+target) <= w {
		return []string{m.ticketLine(t, true, w)} // the URL fits (the rule may not)
	}
	rule := ""
	if e.Rule != "" {
		rule = "  " + e.Rule
	}
	style := m.st.sel
	if e.Red {
		style = m.st.redSel
	}
	lines := wrapURL(left+tunnel+target, rule, w, maxLines)
	for i, l := range lines {
		lines[i] = style.Render(padRight(l, w))
	}
	return lines
}

// wrapIndent begins the lines a URL wraps onto: deeper than any line of the list begins.
const wrapIndent = "      "

// minTail is how many columns of what follows a URL are worth showing beside it.
const minTail = 8

// wrapURL lays out a request's line on a terminal w wide: head (what comes before the URL and
// the URL) then tail (what follows the URL, cut at the screen's edge). A head wider than w is
// broken over at most maxLines lines, each after the first indented, the last ending in "…" when
// even they do not hold it all; the tail follows on the last. A tail with no room beside a head
// that fits goes on a line of its own, so that an "…" at the edge is never read as the URL's.
func wrapURL(head, tail string, w, maxLines int) []string {
	width := ansi.StringWidth(head)
	cw := w - len(wrapIndent)
	if cw < 8 || maxLines < 2 {
		return []string{head + tail}
	}
	if width <= w {
		if tail == "" || width+ansi.StringWidth(tail) <= w || w-width >= minTail {
			return []string{head + tail}
		}
		return []string{head, wrapIndent + strings.TrimLeft(tail, " ")}
	}
	if width > maxLines*w {
		head, width = ansi.Truncate(head, maxLines*w+1, ""), maxLines*w+1 // more than the lines hold
	}
	lines := []string{ansi.Truncate(head, w, "")}
	rest := ansi.Cut(head, w, width)
	for _, l := range strings.Split(ansi.Hardwrap(rest, cw, true), "\n") {
		lines = append(lines, wrapIndent+l)
	}
	if len(lines) > maxLines {
		lines = lines[:maxLines]
		lines[maxLines-1] = ansi.Truncate(lines[maxLines-1], w-1, "") + "…"
	}
	lines[len(lines)-1] += tail
	return lines
}

// recentLine is one decided or expired ticket: time, verdict, by, method, URL (the head), and a
// denial's reason (the tail).
func (m *model) recentLine(t hub.Ticket) (head, tail string) {
	t = t.Escaped()
	at, by, style := t.Expires, "-", m.st.expired
	if t.Decision != nil {
		at, by = t.Decision.At, t.Decision.By
	}
	switch t.Status {
	case hub.Approved:
		style = m.st.approved
	case hub.Denied:
		style = m.st.denied
	}
	head = "  " + at.Format("15:04:05") + "  " + style.Render(padRight(string(t.Status), 8)) + "  " +
		padRight(ansi.Truncate(by, 20, "…"), 20) + "  " + padRight(ansi.Truncate(t.Method, 7, "…"), 7) + "  " + t.URL
	if t.Status == hub.Denied && t.Decision != nil && t.Decision.Reason != "" {
		tail = m.st.faint.Render("  — " + t.Decision.Reason)
	}
	return head, tail
}

// detailHead is the part of the detail view that does not scroll: the title, the state, the
// warnings.
func (m *model) detailHead(w int) []string {
	t, st := m.detail.Escaped(), m.st
	title := "Ticket " + t.ID
	if t.Kind == hub.KindConnect {
		title += " · CONNECT tunnel"
	}
	if t.Red {
		title += " · marked red by the gate"
		title = st.warning.Render(title)
	} else {
		title = st.title.Render(title)
	}
	out := []string{title}
	if t.Status != hub.Pending {
		out = append(out, wrapStyled(st.bad, "no longer pending: "+m.detailState()+"; esc goes back", w)...)
	}
	if t.Kind == hub.KindConnect {
		grant := "the gate's connect grant"
		if t.Grant > 0 {
			grant = t.Grant.String()
		}
		target := fmt.Sprintf("%s:%d", t.Host, t.Port)
		s := fmt.Sprintf("TUNNEL: approving opens %s → %s for %s; reads and writes both pass, unseen, for the grant",
			t.Container, target, grant)
		out = append(out, wrapStyled(st.warning, s, w)...)
	}
	if t.Warning != "" {
		out = append(out, wrapStyled(st.warning, "WARNING: "+t.Warning, w)...)
	}
	if suspicious(m.detail) {
		out = append(out, wrapStyled(st.warn,
			`this ticket holds control, invisible or look-alike characters; they are shown escaped (\x1b, \u{202E}, \u{0430})`, w)...)
	}
	return append(out, "")
}

// detailLines is the part of the detail view that scrolls: every field a human needs.
func (m *model) detailLines(w int) []string {
	t, now := m.detail.Escaped(), m.now()
	var out []string
	field := func(label, value string) {
		const lw = 13
		vw := max(1, w-lw)
		for i, l := range strings.Split(ansi.Hardwrap(value, vw, true), "\n") {
			if i == 0 {
				out = append(out, m.st.label.Render(padRight(label, lw))+l)
			} else {
				out = append(out, strings.Repeat(" ", lw)+l)
			}
		}
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	field("container", dash(t.Container))
	field("agent", dash(t.Agent))
	field("method", dash(t.Method))
	field("url", dash(t.URL))
	if t.Kind == hub.KindConnect {
		field("target", fmt.Sprintf("%s:%d", t.Host, t.Port))
		if t.Grant > 0 {
			field("grant", t.Grant.String())
		}
	}
	field("rule", dash(t.Rule))
	field("reason", dash(t.Reason))
	field("fingerprint", dash(fingerprint.Short(t.Fingerprint)))
	field("created", fmt.Sprintf("%s (%s ago)", t.Created.Format("15:04:05"), fmtAge(now.Sub(t.Created))))
	left := t.Expires.Sub(now)
	if left > 0 {
		field("expires", fmt.Sprintf("%s (in %s)", t.Expires.Format("15:04:05"), left.Truncate(time.Second)))
	} else {
		field("expires", t.Expires.Format("15:04:05")+" (expired)")
	}
	if t.Waiting != "" {
		field("holders", ansi.Wrap(t.Waiting, max(1, w-13), "")) // the hub's sentence, wrapped at words
	} else {
		field("holders", fmt.Sprintf("%d request(s) held now", t.Holders))
	}
	field("body size", fmt.Sprintf("%d bytes", t.BodySize))
	if t.Decision != nil {
		d := fmt.Sprintf("%s by %s at %s", t.Decision.Verdict, t.Decision.By, t.Decision.At.Format("15:04:05"))
		if t.Decision.Reason != "" {
			d += ": " + t.Decision.Reason
		}
		field("decision", d)
	}
	if ra := t.RuleAsk; ra != nil {
		// An agent's request for a rule: its words marked as its own, the rule and the diff
		// taking it makes; y takes it into the policy file and opens :review, nothing more.
		out = append(out, "", m.st.warning.Render("AN AGENT ASKS FOR A RULE (y opens :review on this diff; the policy changes only when you approve the review)"))
		field("agent says", hubapi.AgentWords(ra.AgentReason))
		field("loosens", dash(ra.Loosens))
		field("against", dash(ra.Version))
		out = append(out, "  "+m.st.label.Render("diff"))
		for _, pl := range strings.Split(ra.Diff, "\n") {
			for _, l := range strings.Split(ansi.Hardwrap(pl, max(1, w-4), true), "\n") {
				out = append(out, "    "+l)
			}
		}
	}
	if c := t.MCP; c != nil {
		// The call an approval frees, whatever its id: its server, tool and arguments.
		out = append(out, "", m.st.title.Render("MCP call (approving frees this call once, whatever its id)"))
		field("server", dash(c.Server))
		field("method", dash(c.Method))
		if c.Tool != "" {
			field("tool", c.Tool)
		}
		field("call hash", dash(t.Fingerprint))
		for _, part := range []struct{ label, text string }{{"arguments", c.Arguments}, {"params", c.Params}} {
			if part.text == "" {
				continue
			}
			out = append(out, "  "+m.st.label.Render(part.label))
			for _, pl := range strings.Split(part.text, "\n") {
				for _, l := range strings.Split(ansi.Hardwrap(pl, max(1, w-4), true), "\n") {
					out = append(out, "    "+l)
				}
			}
		}
	}
	out = append(out, "", m.st.title.Render(fmt.Sprintf("Headers (%d)", len(t.Headers))))
	for _, hd := range t.Headers {
		for _, l := range strings.Split(ansi.Hardwrap(hd.Name+": "+hd.Value, max(1, w-2), true), "\n") {
			out = append(out, "  "+l)
		}
	}
	out = append(out, "", m.st.title.Render("Body preview"))
	if t.BodyPreview == "" {
		out = append(out, m.st.faint.Render("  none"))
	}
	for _, pl := range strings.Split(t.BodyPreview, "\n") {
		if t.BodyPreview == "" {
			break
		}
		for _, l := range strings.Split(ansi.Hardwrap(pl, max(1, w-2), true), "\n") {
			out = append(out, "  "+l)
		}
	}
	return out
}

func (m *model) detailScrollMax() int {
	w := m.viewWidth()
	return max(0, len(m.detailLines(w))-(m.bodyRows()-len(m.detailHead(w))))
}

func (m *model) detailBody(w, rows int) []string {
	head := m.detailHead(w)
	lines := m.detailLines(w)
	room := max(0, rows-len(head))
	scroll := min(m.scroll, max(0, len(lines)-room))
	out := head
	for i := scroll; i < len(lines) && i < scroll+room; i++ {
		out = append(out, lines[i])
	}
	if below := len(lines) - scroll - room; below > 0 && room > 0 {
		out[len(out)-1] = m.st.faint.Render(fmt.Sprintf("  … %d more lines (↓)", below))
	}
	return out
}

// suspicious reports whether a ticket holds anything that escaping changes.
func suspicious(t hub.Ticket) bool { return !reflect.DeepEqual(t, t.Escaped()) }

func (m *model) helpBody(w int) []string {
	out := []string{m.st.title.Render("Keys")}
	for _, b := range m.keys.all() {
		out = append(out, "  "+m.st.key.Render(padRight(b.Help().Key, 8))+" "+b.Help().Desc)
	}
	out = append(out, "", m.st.title.Render("Commands"), "  "+strings.Join(m.commandNames(), "  "), "")
	out = append(out, wrapStyled(m.st.faint, "y and n act on one ticket: the one in the details, or the selected one "+
		"in the list. Nothing approves more than one ticket, or without y.", w)...)
	return out
}

func (m *model) qrBody(w, rows int) []string {
	qr := strings.Split(strings.TrimRight(m.qr, "\n"), "\n")
	url := strings.Split(ansi.Hardwrap(display.Escape(m.qrURL, false), max(1, w), true), "\n")
	qw := 0
	for _, l := range qr {
		qw = max(qw, ansi.StringWidth(l))
	}
	out := []string{m.st.title.Render("Pair a phone: scan this code")}
	if phone.LoopbackOnly(m.qrURL) {
		out = append(out, wrapStyled(m.st.warning, "This link names this machine's loopback, which no phone reaches: "+
			"only a browser on this machine opens it. Fix: "+phone.ReachFix+".", w)...)
	}
	if qw > w || len(out)+len(qr)+1+len(url) > rows {
		out = append(out, wrapStyled(m.st.warn, fmt.Sprintf(
			"the terminal is too small for the QR code (it needs %d×%d); enlarge it, or open this URL on the phone:",
			qw, m.viewHeight()-rows+len(out)+1+len(qr)+len(url)), w)...)
		return append(out, url...)
	}
	out = append(out, qr...)
	return append(append(out, ""), url...)
}

func (m *model) outputBody(w, rows int) []string {
	out := []string{m.st.title.Render(m.outTitle)}
	var lines []string
	for _, l := range m.output {
		lines = append(lines, strings.Split(ansi.Hardwrap(l, max(1, w), true), "\n")...)
	}
	room := max(0, rows-1)
	m.outScroll = min(m.outScroll, max(0, len(lines)-room))
	for i := m.outScroll; i < len(lines) && i < m.outScroll+room; i++ {
		out = append(out, lines[i])
	}
	return out
}

// wrapStyled wraps plain text to w columns and styles each line.
func wrapStyled(st lipgloss.Style, s string, w int) []string {
	lines := strings.Split(ansi.Wrap(s, max(1, w), ""), "\n")
	for i, l := range lines {
		lines[i] = st.Render(l)
	}
	return lines
}

func padRight(s string, n int) string { return s + strings.Repeat(" ", max(0, n-ansi.StringWidth(s))) }

func padLeft(s string, n int) string { return strings.Repeat(" ", max(0, n-ansi.StringWidth(s))) + s }

// fmtAge is a duration in its largest unit: 12s, 3m, 5h, 2d.
func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
