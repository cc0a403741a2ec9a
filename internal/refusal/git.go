package refusal

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// A git push over smart HTTP that the gate refuses would show only git's "RPC failed; HTTP 403":
// git prints the body of an error answer for no POST. So a refused push that asked for a side
// band is answered the way git-receive-pack answers one it refuses itself: 200 with its result
// media type, the refusal's lines on the progress band (git shows them as "remote: ...") and
// a fatal message on the error band (formOf picks this form, New makes it). The audit
// records the refusal as it is.

const (
	gitReceivePack = "/git-receive-pack"
	// GitRequestType is the media type of a push's request, GitResultType of its answer.
	GitRequestType   = "application/x-git-receive-pack-request"
	GitResultType    = "application/x-git-receive-pack-result"
	gitPeekCommands  = 64 << 10 // the command list is read for the capabilities this far
	sideBandProgress = 2
	sideBandError    = 3
)

// gitSideBand reports whether r is a git push (receive-pack POST) whose first command, in the
// held body, asks for a side band.
func gitSideBand(r *http.Request, body []byte) bool {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, gitReceivePack) ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), GitRequestType) {
		return false
	}
	first := body[:min(len(body), gitPeekCommands)]
	if i := bytes.IndexByte(first, 0); i >= 0 {
		first = first[i+1:]
		if j := bytes.IndexByte(first, '\n'); j >= 0 {
			first = first[:j]
		}
		for _, c := range strings.Fields(string(first)) {
			if c == "side-band-64k" || c == "side-band" {
				return true
			}
		}
	}
	return false
}

// gitRefusal is the receive-pack answer that carries a refusal's text.
func gitRefusal(body []byte, code string) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(string(body), "\n"), "\n") {
		pkt(&b, sideBandProgress, line+"\n")
	}
	pkt(&b, sideBandError, fmt.Sprintf("lockhttp refused this push (%s)\n", code))
	b.WriteString("0000")
	return b.Bytes()
}

// pkt writes one side-band pkt-line (at most 1,000 bytes of text: the smallest band size).
func pkt(b *bytes.Buffer, band byte, s string) {
	if len(s) > 990 {
		s = s[:990] + "\n"
	}
	fmt.Fprintf(b, "%04x", len(s)+5)
	b.WriteByte(band)
	b.WriteString(s)
}
