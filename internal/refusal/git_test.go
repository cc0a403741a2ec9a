package refusal

import (
	"net/http"
	"net/url"
	"testing"
)

func TestGitSideBand(t *testing.T) {
	cmds := func(caps string) []byte {
		line := "0000000000000000000000000000000000000000 1111111111111111111111111111111111111111 refs/heads/main\x00" + caps + "\n"
		return []byte("00" + "00" + line) // the length prefix is not read
	}
	req := func(method, path, ct string) *http.Request {
		return &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{"Content-Type": {ct}}}
	}
	for _, c := range []struct {
		name string
		r    *http.Request
		body []byte
		want bool
	}{
		{"a push with side-band-64k", req("POST", "/repo.git/git-receive-pack", GitRequestType), cmds("report-status side-band-64k agent=git/2.39"), true},
		{"a push with side-band", req("POST", "/r/git-receive-pack", GitRequestType), cmds("report-status side-band"), true},
		{"a push without a side band", req("POST", "/r/git-receive-pack", GitRequestType), cmds("report-status"), false},
		{"a fetch", req("POST", "/r/git-upload-pack", "application/x-git-upload-pack-request"), cmds("side-band-64k"), false},
		{"another media type", req("POST", "/r/git-receive-pack", "text/plain"), cmds("side-band-64k"), false},
		{"side-band-64k outside the capabilities", req("POST", "/r/git-receive-pack", GitRequestType), []byte("side-band-64k"), false},
	} {
		if got := gitSideBand(c.r, c.body); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	out := string(gitRefusal([]byte("Code:    E_RULE\nWhat to do: ask\n"), "E_RULE"))
	if want := "0015\x02Code:    E_RULE\n0015\x02What to do: ask\n0029\x03lockhttp refused this push (E_RULE)\n0000"; out != want {
		t.Errorf("gitRefusal = %q, want %q", out, want)
	}
}
