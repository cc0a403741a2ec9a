package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestPairSaysWhenNoPhoneReachesTheHub: lox run's hub listens on 127.0.0.1 by default, and its
// pairing links name it. lox pair prints the link (a browser on this machine opens it) and says
// on stderr that no phone reaches it, with the fix (docs/phone.md); a stack whose --phone-url
// names an address a phone reaches gets no such word.
func TestPairSaysWhenNoPhoneReachesTheHub(t *testing.T) {
	pair := func(t *testing.T, state string) (stdout, stderr string) {
		t.Helper()
		cmd := execLox(t, "pair", "--state", state)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("lox pair: %v\n%s%s", err, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	t.Run("loopback", func(t *testing.T) {
		e := startAsk(t, "60s")
		out, errs := pair(t, e.state)
		if !strings.Contains(out, strings.TrimSuffix(e.up.Hub, "/")+"/phone/#pair=") {
			t.Fatalf("want the link, at the hub's loopback address %s:\n%s", e.up.Hub, out)
		}
		want := fmt.Sprintf("lox pair: the link names %s, this machine's loopback, which no phone reaches: only a browser on this machine opens it; fix: make the hub reachable from the phone", e.up.Hub)
		if !strings.Contains(errs, want) || !strings.Contains(errs, "lox run --hub-listen ADDRESS:3131") ||
			!strings.Contains(errs, `docs/phone.md, "Reaching the hub from the phone"`) {
			t.Fatalf("stderr:\n%s\nwant it to say %q and name the fix", errs, want)
		}
		if strings.Contains(errs, "#pair=") {
			t.Errorf("the warning repeats the link's token:\n%s", errs)
		}
	})
	t.Run("an address a phone reaches", func(t *testing.T) {
		r := startStackWith(t, fmt.Sprintf(askPolicy, 9, "60s"), []string{"--phone-url", "http://192.0.2.10:3131"}, nil)
		out, errs := pair(t, r.state)
		if !strings.Contains(out, "http://192.0.2.10:3131/phone/#pair=") {
			t.Fatalf("want the link at --phone-url:\n%s", out)
		}
		if errs != "" {
			t.Errorf("lox pair said on stderr:\n%s\nwant nothing", errs)
		}
	})
}
