package gate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// TestTicketHeaders: a ticket shows every header value, escaped, and masks only credentials: what
// the detector recognises, and the values that are credentials by construction. A header's name
// never hides its value.
func TestTicketHeaders(t *testing.T) {
	gh := "ghp_" + strings.Repeat("Tk7q", 9)
	injected := "deploy-" + strings.Repeat("Zz9", 6)
	d, err := secrets.NewDetector(secrets.Config{Injected: []secrets.Injected{{Name: "deploy", Value: injected}}})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{
		"X-Session-Data": {"hello-world-plain"},
		"X-Api-Token":    {gh},
		"Authorization":  {"Bearer opaque-bearer-value"},
		"X-Secret":       {"see\u202etxt.exe"},
		"X-Deploy":       {injected},
	}
	want := map[string]string{
		"X-Session-Data": "hello-world-plain",
		"X-Api-Token":    secrets.Mask("github", gh),
		"Authorization":  "Bearer " + secrets.Mask("secret", "opaque-bearer-value"),
		"X-Secret":       `see\u{202E}txt.exe`,
		"X-Deploy":       secrets.Mask("injected:deploy", injected),
	}
	for _, tc := range []struct {
		name string
		in   *judge.Checks
		skip string // a header whose value the detector must know to mask
	}{
		{"policy detector", &judge.Checks{Secrets: d}, ""},
		{"no detector: the built-in shapes", nil, "X-Deploy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ticketHeaders(h, tc.in)
			if len(got) != len(h) {
				t.Fatalf("%d headers, want %d: %+v", len(got), len(h), got)
			}
			for i, hd := range got {
				if i > 0 && got[i-1].Name > hd.Name {
					t.Errorf("not sorted: %q before %q", got[i-1].Name, hd.Name)
				}
				if hd.Name == tc.skip {
					continue
				}
				if hd.Value != want[hd.Name] {
					t.Errorf("%s: %q; want %q", hd.Name, hd.Value, want[hd.Name])
				}
			}
			for _, secret := range []string{gh, "opaque-bearer-value"} {
				if s := hubHeadersText(got); strings.Contains(s, secret) {
					t.Errorf("the ticket shows %q: %s", secret, s)
				}
			}
		})
	}
}

func hubHeadersText(hs []hubapi.Header) string {
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(h.Name + ": " + h.Value + "\n")
	}
	return b.String()
}
