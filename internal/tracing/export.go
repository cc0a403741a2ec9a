package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// The export's bounds: each post waits for its answer at most postTimeout; a post the collector
// may take later (429, 502, 503, 504, or no answer) is retried after retryFirst, doubling to
// retryMax, honouring the collector's Retry-After, until retryTotal has passed since the first.
const (
	postTimeout = 10 * time.Second
	retryFirst  = time.Second
	retryMax    = 5 * time.Second
	retryTotal  = 15 * time.Second
	// maxAnswer bounds what is read of the collector's answer.
	maxAnswer = 64 << 10
	// maxEnvFile bounds the PEM files the variables name.
	maxEnvFile = 1 << 20
)

// poster posts encoded ExportTraceServiceRequests to one collector.
type poster struct {
	url     string
	client  *http.Client
	header  http.Header // Content-Type, User-Agent and OTEL_EXPORTER_OTLP_HEADERS
	gzip    bool
	first   time.Duration // retryFirst; shorter in tests
	total   time.Duration // retryTotal; shorter in tests
	zbuf    bytes.Buffer
	zwriter *gzip.Writer
}

// newPoster builds the poster of endpoint from the OTEL_EXPORTER_OTLP_ variables getenv reads:
// each _TRACES_ one first, then the general one.
func newPoster(endpoint, version string, getenv func(string) string) (*poster, error) {
	env := func(name string) (string, string) {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + name, v
		}
		return "OTEL_EXPORTER_OTLP_" + name, getenv("OTEL_EXPORTER_OTLP_" + name)
	}
	p := &poster{url: endpoint, header: http.Header{}, first: retryFirst, total: retryTotal}
	p.header.Set("Content-Type", "application/x-protobuf")
	p.header.Set("User-Agent", strings.TrimSuffix(ServiceName+"/"+version, "/"))
	if name, v := env("HEADERS"); v != "" {
		if err := parseHeaders(p.header, v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	switch name, v := env("COMPRESSION"); strings.ToLower(strings.TrimSpace(v)) {
	case "gzip":
		p.gzip = true
	case "", "none":
	default:
		return nil, fmt.Errorf("%s=%q: write gzip or none", name, v)
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if name, file := env("CERTIFICATE"); file != "" {
		pem, err := readEnvFile(name, file)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate in the file; name the collector's CA certificate", name, file)
		}
		tlsConf.RootCAs = pool
	}
	certName, certFile := env("CLIENT_CERTIFICATE")
	keyName, keyFile := env("CLIENT_KEY")
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%s and %s: set both, the client certificate and its key, or neither", certName, keyName)
	}
	if certFile != "" {
		certPEM, err := readEnvFile(certName, certFile)
		if err != nil {
			return nil, err
		}
		keyPEM, err := readEnvFile(keyName, keyFile)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// The error of X509KeyPair names no key material.
			return nil, fmt.Errorf("%s=%s, %s=%s: %w", certName, certFile, keyName, keyFile, err)
		}
		tlsConf.Certificates = []tls.Certificate{cert}
	}
	p.client = &http.Client{
		Timeout: postTimeout,
		// Straight to the collector, whatever HTTP_PROXY says: the gate's own proxy variables
		// could send its spans through itself.
		Transport: &http.Transport{Proxy: nil, TLSClientConfig: tlsConf, ForceAttemptHTTP2: true,
			MaxIdleConns: 2, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: postTimeout},
		// A redirect is not followed: the body would have to be posted again elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p, nil
}

// readEnvFile reads the file a variable names, bounded.
func readEnvFile(name, file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEnvFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > maxEnvFile {
		return nil, fmt.Errorf("%s=%s: larger than %d bytes; name a PEM file", name, file, maxEnvFile)
	}
	return b, nil
}

// parseHeaders adds to h the headers of an OTEL_EXPORTER_OTLP_HEADERS value: key=value pairs
// apart by commas, each key and value percent-decoded and trimmed of spaces. Its errors never
// quote a value: it may be a credential.
func parseHeaders(h http.Header, v string) error {
	for i, pair := range strings.Split(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		key, err1 := url.PathUnescape(strings.TrimSpace(k))
		value, err2 := url.PathUnescape(strings.TrimSpace(val))
		switch {
		case !ok || err1 != nil || key == "":
			return fmt.Errorf("entry %d is not key=value; write key1=value1,key2=value2, percent-encoding a comma or a percent sign", i+1)
		case err2 != nil:
			return fmt.Errorf("entry %d (%s): its value is not percent-encoded; write %%25 for a percent sign", i+1, safeKey(key))
		case !validHeaderName(key):
			return fmt.Errorf("entry %d: %q is not a header name", i+1, safeKey(key))
		case strings.ContainsAny(value, "\r\n\x00"):
			return fmt.Errorf("entry %d (%s): its value holds a line break or a NUL", i+1, key)
		}
		h.Set(key, value)
	}
	return nil
}

// safeKey is a header name for an error, clipped.
func safeKey(k string) string {
	if len(k) > 64 {
		k = k[:64]
	}
	return strconv.Quote(k)
}

// validHeaderName: a non-empty HTTP token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// retryable is an answer or a failure that may succeed later.
type retryable struct {
	err   error
	after time.Duration // the collector's Retry-After; 0: none
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// errStopped is an export whose retry was cut short by its stop channel.
var errStopped = errors.New("the exporter stopped before a retry")

// export posts body, gzipped when configured, retrying what may succeed later within the total
// retry time, and returns the last failure, or errStopped when stop closes while it waits to
// retry (a nil stop never does). ctx bounds every post.
func (p *poster) export(ctx context.Context, stop <-chan struct{}, body []byte) error {
	if p.gzip {
		p.zbuf.Reset()
		if p.zwriter == nil {
			p.zwriter = gzip.NewWriter(&p.zbuf)
		} else {
			p.zwriter.Reset(&p.zbuf)
		}
		p.zwriter.Write(body)
		p.zwriter.Close()
		body = p.zbuf.Bytes()
	}
	start := time.Now()
	wait := p.first
	for {
		err := p.post(ctx, body)
		var r *retryable
		if err == nil || !errors.As(err, &r) {
			return err
		}
		d := wait + rand.N(wait/2+1) - wait/4 // ±25%
		if r.after > 0 {
			d = r.after
		}
		if time.Since(start)+d > p.total {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-stop:
			t.Stop()
			return errStopped
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// post sends body once.
func (p *poster) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = p.header.Clone()
	if p.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return &retryable{err: err}
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		return &retryable{err: fmt.Errorf("the collector answered %s", resp.Status), after: retryAfter(resp.Header.Get("Retry-After"))}
	default:
		return fmt.Errorf("the collector answered %s", resp.Status)
	}
}

// retryAfter reads a Retry-After header, seconds or an HTTP date; 0 when absent or unreadable.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(min(max(n, 0), 3600)) * time.Second // past the retry time: fails now
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), time.Hour)
	}
	return 0
}
