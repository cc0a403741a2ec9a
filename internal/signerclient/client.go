// Package signerclient gets leaf certificates for the gate from the signer, checks them and
// keeps them in a bounded cache until they are near expiry.
package signerclient

import (
	"bytes"
	"container/list"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/signerapi"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// Defaults of Options.
const (
	DefaultMaxEntries = 4096
	DefaultRenew      = 2 * time.Hour
	DefaultTimeout    = 5 * time.Second
)

// renewRetry is how long a failed renewal waits before the next attempt (the cached certificate
// is served meanwhile).
const renewRetry = 30 * time.Second

// maxResponse bounds a signer response.
const maxResponse = 64 << 10

// maxShownAnswer bounds how much of a signer's answer an error repeats.
const maxShownAnswer = 200

// ErrUnavailable is wrapped by every failure to get an answer from the signer: it cannot be
// reached, it timed out, or it answered something other than a certificate or a refusal (5xx,
// 429, 403, ...). A refusal of the name is a *RefusedError instead.
var ErrUnavailable = errors.New("signer unavailable")

// RefusedError is the signer's refusal (400) to certify a name; Reason is its explanation (for
// example "refused to sign: floor:ip-literal: ..."). It never holds key material.
type RefusedError struct {
	Reason string
}

// Error returns "signer refused: <reason>".
func (e *RefusedError) Error() string { return "signer refused: " + e.Reason }

// Options configures a Client.
type Options struct {
	// Socket is the signer's unix socket, or https://HOST:PORT, a signer on another machine (its
	// --tls-listen) reached over mutual TLS with TLS. Required.
	Socket string
	// TLS is the gate's configuration of mutual TLS (mtls.Source.ClientConfig) for an https://
	// Socket. Nil: none (a unix socket).
	TLS *tls.Config
	// Logger receives renewal failures and one debug line per certificate fetched. Nil: none.
	Logger *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// MaxEntries is how many certificates are cached; beyond it the least recently used goes.
	// Zero means DefaultMaxEntries.
	MaxEntries int
	// Renew is how long before expiry a cached certificate is renewed. Zero means DefaultRenew.
	Renew time.Duration
	// Timeout bounds one signer call. Zero means DefaultTimeout.
	Timeout time.Duration
	// Metrics counts the signer calls and the cache's hits and misses. Nil: nothing counted.
	Metrics *metrics.SignerClient
}

// Client gets certificates for the gate's one leaf key, generated in memory by New.
type Client struct {
	socket  string // the socket's path or the signer's URL, for errors
	base    string // the URL the routes are under
	log     *slog.Logger
	now     func() time.Time
	max     int
	renew   time.Duration
	timeout time.Duration
	http    *http.Client
	key     *ecdsa.PrivateKey
	body    []byte // the start of every sign request: {"public_key":"...","host":
	m       *metrics.SignerClient

	lastCA atomic.Pointer[issuer] // the CA of the last certificate, shared by entries

	mu       sync.Mutex
	entries  map[string]*list.Element // guarded by mu: host → element of lru holding an *entry
	lru      list.List                // guarded by mu: front is the most recently used
	inflight map[string]*call         // guarded by mu: host → the signer call under way
}

// entry is a cached certificate.
type entry struct {
	host    string
	cert    *tls.Certificate
	renewAt time.Time // NotAfter - renew
	expires time.Time // NotAfter
	retryAt time.Time // after a failed renewal: no new attempt before this
}

// call is one signer call, shared by every caller asking for its host meanwhile.
type call struct {
	done chan struct{}
	cert *tls.Certificate // set before done is closed
	err  error            // set before done is closed
}

// issuer is a CA certificate as the signer sent it.
type issuer struct {
	pem  string
	cert *x509.Certificate
	pool *x509.CertPool
}

// New returns a client of the signer at o.Socket and generates the gate's leaf key (ECDSA
// P-256), which never leaves memory. It does not contact the signer (see Health).
func New(o Options) (*Client, error) {
	if o.Socket == "" {
		return nil, errors.New("signerclient: Options.Socket is empty; give the path of the signer's unix socket")
	}
	if o.MaxEntries < 0 || o.Renew < 0 || o.Timeout < 0 {
		return nil, errors.New("signerclient: MaxEntries, Renew and Timeout must not be negative; zero means the default")
	}
	c := &Client{
		socket: o.Socket, log: o.Logger, now: o.Now, max: o.MaxEntries, renew: o.Renew, timeout: o.Timeout, m: o.Metrics,
		entries:  make(map[string]*list.Element),
		inflight: make(map[string]*call),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.max == 0 {
		c.max = DefaultMaxEntries
	}
	if c.renew == 0 {
		c.renew = DefaultRenew
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("signerclient: generating the leaf key: %w", err)
	}
	c.key = key
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("signerclient: encoding the leaf key: %w", err)
	}
	c.body = []byte(`{"public_key":"` + base64.StdEncoding.EncodeToString(der) + `","host":`)
	c.http, c.base = unixsock.Client(o.Socket, c.timeout), "http://signer"
	if strings.HasPrefix(o.Socket, "https://") {
		u, err := url.Parse(o.Socket)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || o.TLS == nil {
			return nil, fmt.Errorf("signerclient: signer URL %q: write https://HOST:PORT (the signer's --tls-listen), with the gate's identity for mutual TLS", o.Socket)
		}
		c.base = "https://" + u.Host
		c.http = &http.Client{Timeout: c.timeout, Transport: &http.Transport{Proxy: nil, TLSClientConfig: o.TLS,
			TLSHandshakeTimeout: c.timeout, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}}
	}
	return c, nil
}

// Certificate returns a certificate for host (as floor.Host normalises it) with the gate's key:
// the chain is the leaf, then the CA, and Leaf is set. It comes from the cache, or from the
// signer; concurrent first requests for a host share one signer call. A cached certificate that
// is less than Renew from expiry is still returned while a renewal runs in the background; while
// renewals fail it is used until it expires. The result is shared: do not modify it.
//
// Errors: ErrUnavailable (wrapped) when the signer cannot answer, *RefusedError when it refuses
// the name, the context's error when ctx ends first, and a plain error when the signer's answer
// does not check out (another name, another key, not chaining to its CA, not valid now).
func (c *Client) Certificate(ctx context.Context, host string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	if el, ok := c.entries[host]; ok {
		e := el.Value.(*entry)
		if now.Before(e.expires) {
			c.lru.MoveToFront(el)
			if !now.Before(e.renewAt) && !now.Before(e.retryAt) && c.inflight[host] == nil {
				c.startLocked(host)
			}
			c.mu.Unlock()
			c.m.Cache(true)
			return e.cert, nil
		}
		c.lru.Remove(el)
		delete(c.entries, host)
	}
	cl := c.inflight[host]
	if cl == nil {
		cl = c.startLocked(host)
	}
	c.mu.Unlock()
	c.m.Cache(false)
	select {
	case <-cl.done:
		return cl.cert, cl.err
	case <-ctx.Done():
		return nil, fmt.Errorf("certificate for %q: %w", host, ctx.Err())
	}
}

// startLocked starts a signer call for host. The call runs on its own, bounded by the timeout,
// so that a caller that gives up does not fail the others.
func (c *Client) startLocked(host string) *call {
	cl := &call{done: make(chan struct{})}
	c.inflight[host] = cl
	go c.run(host, cl)
	return cl
}

func (c *Client) run(host string, cl *call) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	start := time.Now()
	cert, err := c.fetch(ctx, host)
	cancel()
	c.m.Called(callResult(err), time.Since(start))
	now := c.now()
	c.mu.Lock()
	delete(c.inflight, host)
	if err == nil {
		c.storeLocked(host, cert)
	} else if el, ok := c.entries[host]; ok {
		e := el.Value.(*entry)
		e.retryAt = now.Add(renewRetry)
		c.log.Warn("certificate renewal failed; serving the cached certificate until it expires",
			"host", host, "expires", e.expires, "err", err)
	}
	c.mu.Unlock()
	cl.cert, cl.err = cert, err
	close(cl.done)
}

func (c *Client) storeLocked(host string, cert *tls.Certificate) {
	// A leaf shortened by a node signer's intermediate is renewed when a third of what was left
	// of it remains, or Renew before expiry, whichever comes first.
	renew := min(c.renew, cert.Leaf.NotAfter.Sub(c.now())/3)
	e := &entry{host: host, cert: cert, expires: cert.Leaf.NotAfter, renewAt: cert.Leaf.NotAfter.Add(-renew)}
	if el, ok := c.entries[host]; ok {
		el.Value = e
		c.lru.MoveToFront(el)
		return
	}
	c.entries[host] = c.lru.PushFront(e)
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*entry).host)
	}
}

// fetch asks the signer for a certificate and checks it.
func (c *Client) fetch(ctx context.Context, host string) (*tls.Certificate, error) {
	hostJSON, err := json.Marshal(host)
	if err != nil {
		return nil, err
	}
	body := slices.Concat(c.body, hostJSON, []byte("}"))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/sign", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.unreachable(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, c.unreachable(err)
	}
	if len(data) > maxResponse {
		return nil, fmt.Errorf("%w: signer at %s: the response is over %d bytes", ErrUnavailable, c.socket, maxResponse)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusBadRequest:
		var er signerapi.ErrorResponse
		if err := json.Unmarshal(data, &er); err != nil || er.Error == "" {
			return nil, &RefusedError{Reason: fmt.Sprintf("400 with an unreadable body (%d bytes)", len(data))}
		}
		return nil, &RefusedError{Reason: er.Error}
	default:
		return nil, c.badStatus(resp, data)
	}
	cert, err := c.check(host, data)
	if err != nil {
		return nil, fmt.Errorf("signer at %s gave a bad certificate for %q: %w", c.socket, host, err)
	}
	c.log.Debug("certificate fetched", "host", host, "serial", cert.Leaf.SerialNumber.Text(16), "not_after", cert.Leaf.NotAfter)
	return cert, nil
}

// check reads a sign response and accepts it only if the leaf certifies exactly host, for the
// gate's key, chains to the CA sent with it, and is valid now.
func (c *Client) check(host string, data []byte) (*tls.Certificate, error) {
	var sr signerapi.SignResponse
	if err := json.Unmarshal(data, &sr); err != nil {
		return nil, fmt.Errorf("unreadable response: %w", err)
	}
	block, rest := pem.Decode([]byte(sr.Certificate))
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("certificate is not exactly one PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	ca, err := c.issuer(sr.CA)
	if err != nil {
		return nil, err
	}
	chain, err := parseChain(sr.Chain)
	if err != nil {
		return nil, err
	}
	switch {
	case !c.key.PublicKey.Equal(leaf.PublicKey):
		return nil, errors.New("it certifies another public key than the gate's")
	case len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != host:
		return nil, fmt.Errorf("it names %q, not exactly [%q]", leaf.DNSNames, host)
	case len(leaf.IPAddresses)+len(leaf.URIs)+len(leaf.EmailAddresses) != 0:
		return nil, errors.New("it names IP addresses, URIs or emails besides the host")
	case leaf.IsCA:
		return nil, errors.New("it is a CA certificate")
	case sr.Serial != leaf.SerialNumber.Text(16):
		return nil, fmt.Errorf("serial %q does not match the certificate's %x", sr.Serial, leaf.SerialNumber)
	}
	if na, err := time.Parse(time.RFC3339, sr.NotAfter); err != nil || !na.Equal(leaf.NotAfter) {
		return nil, fmt.Errorf("not_after %q does not match the certificate's %s", sr.NotAfter, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	served := [][]byte{leaf.Raw}
	for _, ic := range chain {
		if leaf.NotAfter.After(ic.NotAfter) {
			return nil, fmt.Errorf("it outlives its intermediate %q (expires %s, the intermediate %s)", ic.Subject.String(),
				leaf.NotAfter.UTC().Format(time.RFC3339), ic.NotAfter.UTC().Format(time.RFC3339))
		}
		inter.AddCert(ic)
		served = append(served, ic.Raw)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         ca.pool,
		Intermediates: inter,
		DNSName:       host,
		CurrentTime:   c.now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, err
	}
	// The gate serves the leaf, its intermediates (a node signer's), then the CA.
	return &tls.Certificate{Certificate: append(served, ca.cert.Raw), PrivateKey: c.key, Leaf: leaf}, nil
}

// maxChain bounds the intermediates a sign response may carry (a node signer sends one).
const maxChain = 2

// parseChain reads the intermediates of a sign response: PEM certificates, each a CA.
func parseChain(chainPEM string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := []byte(chainPEM)
	for len(bytes.TrimSpace(rest)) != 0 {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil || block.Type != "CERTIFICATE" {
			return nil, errors.New("chain is not a list of PEM certificates")
		}
		if len(out) == maxChain {
			return nil, fmt.Errorf("chain has more than %d certificates", maxChain)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("chain: %w", err)
		}
		if !cert.BasicConstraintsValid || !cert.IsCA {
			return nil, errors.New("chain holds a certificate that is not a CA")
		}
		out = append(out, cert)
	}
	return out, nil
}

// issuer parses the CA sent with a certificate, reusing the last one when it is the same.
func (c *Client) issuer(caPEM string) (*issuer, error) {
	if last := c.lastCA.Load(); last != nil && last.pem == caPEM {
		return last, nil
	}
	block, rest := pem.Decode([]byte(caPEM))
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("ca is not exactly one PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, errors.New("ca is not a CA certificate")
	}
	is := &issuer{pem: caPEM, cert: cert, pool: x509.NewCertPool()}
	is.pool.AddCert(cert)
	c.lastCA.Store(is)
	return is, nil
}

// unreachable wraps a failure to talk to the signer.
func (c *Client) unreachable(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection") { // net/http says this in words only
		return fmt.Errorf("%w: signer at %s closed the connection (%v); if it closes every connection, start it with --allow-uid %d",
			ErrUnavailable, c.socket, err, os.Geteuid())
	}
	return fmt.Errorf("%w: signer at %s: %w", ErrUnavailable, c.socket, err)
}

// badStatus wraps an answer that is neither a certificate nor a refusal.
func (c *Client) badStatus(resp *http.Response, data []byte) error {
	msg := string(data)
	var er signerapi.ErrorResponse
	if json.Unmarshal(data, &er) == nil && er.Error != "" {
		msg = er.Error
	}
	msg = display.Line(msg, maxShownAnswer)
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return fmt.Errorf("%w: signer at %s is rate limiting (retry after %ss): %s", ErrUnavailable, c.socket, resp.Header.Get("Retry-After"), msg)
	case http.StatusForbidden:
		return fmt.Errorf("%w: signer at %s refuses this process; start it with --allow-uid %d", ErrUnavailable, c.socket, os.Geteuid())
	}
	return fmt.Errorf("%w: signer at %s answered %s: %s", ErrUnavailable, c.socket, resp.Status, msg)
}

// Health asks the signer's GET /health; nil when it answers 200. Failures wrap ErrUnavailable.
func (c *Client) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode != http.StatusOK {
		return c.badStatus(resp, data)
	}
	var h signerapi.Health
	if err := json.Unmarshal(data, &h); err != nil || h.CANotAfter == "" {
		return fmt.Errorf("%w: signer at %s: /health answered %s, which is not a signer's health", ErrUnavailable, c.socket, strconv.Quote(display.Truncate(string(data), maxShownAnswer)))
	}
	return nil
}
