package phone

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/lockhttp/lockhttp/internal/fingerprint"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// The browser tests drive Debian's chromium headless through chromedp. Without chromium they
// skip, except under CI=true, where they fail: CI must install it (apt-get install -y chromium).

func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed, and CI must run the browser tests: apt-get install -y chromium")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); skipping the browser test")
	return ""
}

// browser is a headless chromium tab with the console collected.
type browser struct {
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage // guarded by mu
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.DisableGPU,
		chromedp.WindowSize(412, 915), // a phone's viewport
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run its sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	start := time.Now()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium %s: %v", path, err)
	}
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))
	b := &browser{ctx: ctx}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// noConsoleErrors fails on an error or exception in the page's console: a CSP violation, a
// script error, a failed request.
func (b *browser) noConsoleErrors(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			t.Errorf("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line)
		}
	}
}

// waitTicket polls the hub until the ticket is no longer pending.
func waitTicket(t *testing.T, h *hub.Hub, id string) hub.Ticket {
	t.Helper()
	var tk hub.Ticket
	testkit.WaitFor(t, 20*time.Second, "ticket "+id+" no longer pending", func() bool {
		var ok bool
		tk, ok = h.Get(id)
		return ok && tk.Status != hub.Pending
	})
	return tk
}

func ticketSel(id string) chromedp.CSS {
	return chromedp.CSS(`#pending li[data-ticket-id="` + id + `"] button`)
}

// pairBrowser opens a pairing link, names the device and pairs.
func pairBrowser(t *testing.T, e *env, b *browser, device string) {
	t.Helper()
	link, err := e.srv.NewPairing()
	if err != nil {
		t.Fatal(err)
	}
	b.do(t, "open the pairing link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.ID("pair-form")),
	)
	if loc := eval[string](t, b, `location.href`); strings.Contains(loc, "#") || strings.Contains(loc, "pair") {
		t.Fatalf("the pairing token is still in the address bar: %s", loc)
	}
	b.do(t, "pair",
		chromedp.Evaluate[chromedp.Void](`document.getElementById("device").value = ""`),
		chromedp.SendKeys(chromedp.ID("device"), device),
		chromedp.Click(chromedp.ID("pair-button")),
		chromedp.WaitVisible(chromedp.ID("list-view")),
		chromedp.WaitVisible(chromedp.CSS("#conn.live")),
	)
}

func TestBrowserPhone(t *testing.T) {
	e := newEnv(t, false)
	b := newBrowser(t)
	start := time.Now()

	pairBrowser(t, e, b, "pixel-test")
	sess := eval[string](t, b, `localStorage.getItem("lockhttp.phone.session") || ""`)
	if len(sess) != 43 || e.srv.authenticate(sess, "") == nil {
		t.Fatalf("localStorage holds %q, not a live session token", sess)
	}
	if ss := e.srv.Sessions(); len(ss) != 1 || ss[0].Device != "pixel-test" {
		t.Fatalf("sessions %+v", ss)
	}

	// A reload keeps the pairing.
	b.do(t, "reload",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.ID("list-view")),
		chromedp.WaitVisible(chromedp.CSS("#conn.live")),
	)
	eval[chromedp.Void](t, b, `window.__sameDocument = 42`)

	t.Run("new ticket appears and is approved", func(t *testing.T) {
		tk := e.ask("https://api.github.com/repos/acme/app/issues", `{"title":"hello"}`)
		b.do(t, "wait for the ticket", chromedp.WaitVisible(ticketSel(tk.ID)))
		if n := eval[int](t, b, `window.__sameDocument`); n != 42 {
			t.Fatal("the page reloaded to show the ticket")
		}
		b.do(t, "open the ticket",
			chromedp.Click(ticketSel(tk.ID)),
			chromedp.WaitVisible(chromedp.ID("detail-view")),
		)
		if got := eval[string](t, b, `document.getElementById("d-fp").textContent`); got != fingerprint.Short(tk.Fingerprint) {
			t.Fatalf("fingerprint shown %q, want %q", got, fingerprint.Short(tk.Fingerprint))
		}
		if got := eval[string](t, b, `document.getElementById("d-url").textContent`); got != tk.URL {
			t.Fatalf("URL shown %q", got)
		}
		b.do(t, "first tap on approve",
			chromedp.Click(chromedp.ID("approve")),
			chromedp.WaitVisible(chromedp.ID("confirm")),
		)
		if got, _ := e.hub.Get(tk.ID); got.Status != hub.Pending {
			t.Fatalf("one tap approved: %s", got.Status)
		}
		b.do(t, "confirm",
			chromedp.WaitEnabled(chromedp.ID("approve-confirm")),
			chromedp.Click(chromedp.ID("approve-confirm")),
		)
		got := waitTicket(t, e.hub, tk.ID)
		if got.Status != hub.Approved || got.Decision.By != "phone:pixel-test" {
			t.Fatalf("after approving on the page: %s %+v", got.Status, got.Decision)
		}
		b.do(t, "the ticket leaves the list and joins the recent ones",
			chromedp.WaitVisible(chromedp.ID("list-view")),
			chromedp.WaitNotPresent(ticketSel(tk.ID)),
			chromedp.WaitVisible(chromedp.CSS(`#recent li[data-recent-id="`+tk.ID+`"]`)),
		)
	})

	t.Run("decided elsewhere leaves", func(t *testing.T) {
		tk := e.ask("https://api.example.com/elsewhere", `{}`)
		b.do(t, "wait for the ticket", chromedp.WaitVisible(ticketSel(tk.ID)))
		if _, err := e.hub.Decide(tk.ID, tk.Fingerprint, false, "terminal:alice", "not now"); err != nil {
			t.Fatal(err)
		}
		b.do(t, "the ticket leaves", chromedp.WaitNotPresent(ticketSel(tk.ID)))
		if got := eval[string](t, b, `document.querySelector('#recent li[data-recent-id="`+tk.ID+`"]').textContent`); !strings.Contains(got, "terminal:alice") {
			t.Fatalf("recent entry %q does not name who decided", got)
		}
	})

	t.Run("agent text stays text and deny", func(t *testing.T) {
		evilURL := `https://evil.example/<img src=x onerror="window.__pwned=1">?q=<script>window.__pwned=2</script>`
		evilBody := `<script>window.__pwned=3</script><img src=x onerror="window.__pwned=4"><svg onload="window.__pwned=5">`
		ans, err := e.hub.Ask(hub.AskRequest{Kind: hub.KindRequest, Container: `c<b>1</b>`, Agent: `<svg onload="window.__pwned=6">`,
			Method: "POST", URL: evilURL, BodyPreview: evilBody, BodySize: int64(len(evilBody)) + 100,
			Rule: `<a href="javascript:window.__pwned=7">rule</a>`, Reason: `<iframe src="javascript:window.__pwned=8">`,
			Fingerprint: "fp1:" + strings.Repeat("e", 64), Red: true,
			Warning: `<img src=x onerror="window.__pwned=9"> reads and writes both pass`,
			Headers: []hub.Header{{Name: `X-<i>n</i>`, Value: `<img src=x onerror="window.__pwned=10">`}},
			MCP: &hub.MCPCall{Server: `<b>files</b>`, Method: "tools/call", Tool: `<img src=x onerror="window.__pwned=11">`,
				Arguments: "{\n  \"a\": \"<script>window.__pwned=12</script>\"\n}"}})
		if err != nil {
			t.Fatal(err)
		}
		tk := ans.Ticket
		b.do(t, "open the ticket",
			chromedp.WaitVisible(ticketSel(tk.ID)),
			chromedp.Click(ticketSel(tk.ID)),
			chromedp.WaitVisible(chromedp.ID("detail-view")),
			chromedp.WaitVisible(chromedp.ID("d-warning")),
		)
		injected := eval[int](t, b, `document.querySelectorAll("img, svg, iframe, a, b, i, object, embed").length`)
		scripts := eval[int](t, b, `document.scripts.length`)
		pwned := eval[bool](t, b, `window.__pwned !== undefined`)
		if injected != 0 || scripts != 1 || pwned {
			t.Fatalf("agent text became markup: %d injected elements, %d scripts, pwned %v", injected, scripts, pwned)
		}
		for id, want := range map[string]string{
			"d-url": evilURL, "d-body": evilBody, "d-agent": tk.Agent, "d-container": tk.Container, "d-rule": tk.Rule,
			"d-reason": tk.Reason, "d-warning": "⚠ " + tk.Warning,
			"d-mcp-server": tk.MCP.Server, "d-mcp-tool": tk.MCP.Tool, "d-mcp-args": tk.MCP.Arguments, "d-mcp-hash": tk.Fingerprint,
		} {
			if got := eval[string](t, b, `document.getElementById("`+id+`").textContent`); got != want {
				t.Errorf("#%s shows %q, want %q", id, got, want)
			}
		}
		if !eval[bool](t, b, `document.getElementById("detail-view").classList.contains("red")`) {
			t.Error("a red ticket is not shown red")
		}
		if got := eval[string](t, b, `document.querySelector("#d-headers dd").textContent`); got != tk.Headers[0].Value {
			t.Errorf("header value shown %q", got)
		}

		// Deny needs a reason: the button stays disabled without one.
		if !eval[bool](t, b, `document.getElementById("deny").disabled`) {
			t.Fatal("deny is enabled without a reason")
		}
		b.do(t, "deny with a reason",
			chromedp.SendKeys(chromedp.ID("reason"), "no posting to evil.example"),
			chromedp.WaitEnabled(chromedp.ID("deny")),
			chromedp.Click(chromedp.ID("deny")),
		)
		got := waitTicket(t, e.hub, tk.ID)
		if got.Status != hub.Denied || got.Decision.By != "phone:pixel-test" || got.Decision.Reason != "no posting to evil.example" {
			t.Fatalf("after denying on the page: %s %+v", got.Status, got.Decision)
		}
		b.do(t, "back to the list", chromedp.WaitVisible(chromedp.ID("list-view")), chromedp.WaitNotPresent(ticketSel(tk.ID)))
		if eval[bool](t, b, `window.__pwned !== undefined`) {
			t.Fatal("agent text ran as script")
		}
	})

	t.Run("revoked phone is told", func(t *testing.T) {
		for _, s := range e.srv.Sessions() {
			e.srv.Revoke(s.ID)
		}
		b.do(t, "the page shows it is unpaired", chromedp.WaitVisible(chromedp.ID("unpaired-view")))
		if s := eval[string](t, b, `localStorage.getItem("lockhttp.phone.session") || ""`); s != "" {
			t.Fatal("the revoked token stays in localStorage")
		}
	})

	b.noConsoleErrors(t)
	t.Logf("browser flow took %v", time.Since(start).Round(time.Millisecond))
}

// TestBrowserAppearanceLatency measures the time from a ticket's creation (hub.Ask) to its
// appearance on the phone page, over 20 tickets. It logs the figures; timing never fails it.
//
//	in page:  Ask → the ticket's element is in the DOM (a MutationObserver stamps it with the
//	          wall clock; the hub and chromium share this machine's clock)
//	observed: Ask → chromedp's WaitVisible returns (adds the DevTools round trips of the test)
func TestBrowserAppearanceLatency(t *testing.T) {
	e := newEnv(t, false)
	b := newBrowser(t)
	pairBrowser(t, e, b, "bench")
	eval[chromedp.Void](t, b, `
		window.__seen = {};
		new MutationObserver(() => {
			const now = performance.timeOrigin + performance.now();
			for (const li of document.querySelectorAll("#pending li[data-ticket-id]")) {
				if (!(li.dataset.ticketId in window.__seen)) window.__seen[li.dataset.ticketId] = now;
			}
		}).observe(document.getElementById("pending"), {childList: true});
	`)
	const n = 20
	var inPage, observed []time.Duration
	for i := range n {
		created := time.Now()
		tk := e.ask(fmt.Sprintf("https://api.example.com/latency/%d", i), `{}`)
		b.do(t, "wait for the ticket", chromedp.WaitVisible(ticketSel(tk.ID)))
		observed = append(observed, time.Since(created))
		seen := eval[float64](t, b, `window.__seen["`+tk.ID+`"] || 0`)
		if seen == 0 {
			t.Fatalf("the observer missed ticket %s", tk.ID)
		}
		inPage = append(inPage, time.UnixMicro(int64(seen*1000)).Sub(created))
		// Keep the list short, as a person answering would.
		if _, err := e.hub.Decide(tk.ID, tk.Fingerprint, true, "terminal:bench", ""); err != nil {
			t.Fatal(err)
		}
		b.do(t, "wait for the ticket to leave", chromedp.WaitNotPresent(ticketSel(tk.ID)))
	}
	t.Logf("creation → appearance on the phone page, %d tickets: in page %s; observed by chromedp %s", n, stats(inPage), stats(observed))
	b.noConsoleErrors(t)
}

func stats(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	r := func(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("median %s (min %s, p90 %s, max %s)", r(q(0.5)), r(s[0]), r(q(0.9)), r(s[len(s)-1]))
}
