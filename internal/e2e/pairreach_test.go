package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
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

// TestDoctorWarnsOfPhonesOnALoopbackHub: lockhttp doctor on lox run's default hub (on
// 127.0.0.1) says nothing of phones while none is paired; once one is (as the page pairs, with
// the link's token and the page's Origin), it WARNs that pairing links name the loopback, with
// the fix.
func TestDoctorWarnsOfPhonesOnALoopbackHub(t *testing.T) {
	r := startStack(t, doctorPolicy)
	out, code := runDoctor(t, "--state", r.state)
	if code != 0 || strings.Contains(out, "phone(s) paired") {
		t.Fatalf("no phone paired: want no word of phones; exit %d\n%s", code, out)
	}

	cmd := execLox(t, "pair", "--state", r.state)
	link, err := cmd.Output()
	if err != nil {
		t.Fatalf("lox pair: %v", err)
	}
	var token, origin string
	for _, f := range strings.Fields(string(link)) {
		if u, err := url.Parse(f); err == nil && strings.HasPrefix(u.Fragment, "pair=") {
			token, origin = strings.TrimPrefix(u.Fragment, "pair="), u.Scheme+"://"+u.Host
		}
	}
	if token == "" {
		t.Fatalf("no pairing link in:\n%s", link)
	}
	req, _ := http.NewRequest("POST", origin+"/phone/v1/pair", strings.NewReader(fmt.Sprintf(`{"token":%q,"device":"pixel"}`, token)))
	req.Header.Set("Origin", origin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pairing: %s", resp.Status)
	}

	out, code = runDoctor(t, "--state", r.state)
	want := fmt.Sprintf("1 phone(s) paired, but pairing links name %s, this machine's loopback, which no phone reaches but through a tunnel of its own (adb reverse, ssh -R); fix: make the hub reachable from the phone", origin)
	if code != 0 || !hasLine(out, "WARN", "phone", want) || !strings.Contains(out, `docs/phone.md, "Reaching the hub from the phone"`) {
		t.Fatalf("one phone paired: want a WARN phone line %q with the fix; exit %d\n%s", want, code, out)
	}
}
