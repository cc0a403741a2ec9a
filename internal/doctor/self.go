package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/gate"
)

// SelfRequests asks the gate at proxy for its own name: http://lockhttp.internal/ and, with
// caFile, https://lockhttp.internal/ trusting only that CA. Nothing leaves the gate.
func SelfRequests(ctx context.Context, proxy, caFile string) *SelfFacts {
	s := &SelfFacts{Proxy: proxy, CAFile: caFile}
	pu, err := url.Parse(proxy)
	if err != nil || pu.Host == "" {
		s.PlainErr = fmt.Sprintf("the proxy URL %q does not parse", proxy)
		return s
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var perr error
	if s.Plain, perr = selfGet(ctx, client, "http://"+floor.SelfName+"/"); perr != nil {
		s.PlainErr = perr.Error()
		var ref *refusal
		if errors.As(perr, &ref) {
			s.PlainCode = ref.code
		}
	}
	if caFile == "" {
		return s
	}
	pool := x509.NewCertPool()
	data, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(data) {
		s.DecryptedErr = fmt.Sprintf("%s holds no certificate (%v)", caFile, err)
		return s
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	s.Decrypted, err = selfGet(ctx, client, "https://"+floor.SelfName+"/")
	if err != nil {
		s.DecryptedErr = err.Error()
		var ua x509.UnknownAuthorityError
		var ci x509.CertificateInvalidError
		var he x509.HostnameError
		var ve *tls.CertificateVerificationError
		s.Untrusted = errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &he) || errors.As(err, &ve)
	}
	return s
}

func selfGet(ctx context.Context, c *http.Client, u string) (*gate.SelfAnswer, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != 200 {
		why := strings.TrimSpace(string(body))
		if code := resp.Header.Get(gate.HeaderCode); code != "" {
			why = code + ": " + firstLine(why, "Why:")
		}
		return nil, &refusal{code: resp.Header.Get(gate.HeaderCode), text: fmt.Sprintf("answered %d (%s)", resp.StatusCode, display.Line(why, 300))}
	}
	var a gate.SelfAnswer
	if err := json.Unmarshal(body, &a); err != nil || a.Gate != "lockhttp" {
		return nil, fmt.Errorf("the answer is not the gate's: %s", display.Line(string(body), 200))
	}
	return &a, nil
}

// refusal is an answer of the gate other than 200: its code (E_SOURCE_UNKNOWN), if it named one.
type refusal struct{ code, text string }

func (r *refusal) Error() string { return r.text }

// firstLine returns the text after prefix on the line that starts with it, or s.
func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(l, prefix))
		}
	}
	return s
}
