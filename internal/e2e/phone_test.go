package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; .ci/run must install it")
	}
	t.Skip("chromium is not installed")
	return ""
}

// TestPhoneApprovesAHeldRequest pairs a headless Chromium with the real stack (lox pair), holds a
// request through the gate, waits for it on the page without a reload, and approves it with two
// taps: the request goes out.
func TestPhoneApprovesAHeldRequest(t *testing.T) {
	path := chromium(t)
	e := startAsk(t, "60s")
	out, err := e.lox(t, "pair")
	if err != nil {
		t.Fatalf("lox pair: %v\n%s", err, out)
	}
	var link string
	for _, f := range strings.Fields(out) {
		if strings.Contains(f, "/phone/#pair=") {
			link = f
		}
	}
	if link == "" {
		t.Fatalf("no pairing link in:\n%s", out)
	}
	_, do := phoneBrowser(t, path)
	do("pair", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("pair-form")),
		chromedp.Click(chromedp.ID("pair-button")), chromedp.WaitVisible(chromedp.ID("list-view")),
		chromedp.WaitVisible(chromedp.CSS("#conn.live")))
	res := e.send("POST", "/from-the-phone", "tap")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/from-the-phone", e.port))
	sel := chromedp.CSS(`#pending li[data-ticket-id="` + tk.ID + `"] button`)
	do("the ticket appears without a reload", chromedp.WaitVisible(sel))
	do("open and approve", chromedp.Click(sel), chromedp.WaitVisible(chromedp.ID("detail-view")),
		chromedp.Click(chromedp.ID("approve")), chromedp.WaitVisible(chromedp.ID("confirm")))
	select {
	case r := <-res:
		t.Fatalf("one tap released the request: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	do("confirm", chromedp.WaitEnabled(chromedp.ID("approve-confirm")), chromedp.Click(chromedp.ID("approve-confirm")))
	select {
	case r := <-res:
		if r.status != 200 || r.body != "origin saw POST /from-the-phone (3 bytes)" {
			t.Fatalf("after approving on the phone: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the approval on the phone did not release the request")
	}
	testkit.WaitFor(t, 5*time.Second, "the audit names the phone", func() bool {
		for _, m := range e.auditRecords() {
			if a, _ := m["approver"].(string); m["ticket"] == tk.ID && strings.HasPrefix(a, "phone:") {
				return true
			}
		}
		return false
	})
}

// phoneBrowser starts a headless Chromium (the binary at path) with a phone's window, for two
// minutes at most, closed when the test ends. do runs steps in it and fails the test with what.
func phoneBrowser(t *testing.T, path string) (ctx context.Context, do func(what string, steps ...chromedp.Action[chromedp.Void])) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.DisableGPU, chromedp.WindowSize(412, 915))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	do = func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	return ctx, do
}
