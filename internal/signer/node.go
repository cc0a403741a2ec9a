package signer

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/signerapi"
)

// maxRootAnswer bounds a root signer's answer to a node.
const maxRootAnswer = 64 << 10

// The retry bounds of a node whose request to the root failed.
const (
	minRetry = time.Second
	maxRetry = time.Minute
)

// NodeConfig configures a Node.
type NodeConfig struct {
	// Root is the root signer's URL, https://HOST:PORT (its --tls-listen). Required unless Fetch
	// is set.
	Root string
	// TLS is the node's configuration of mutual TLS for Root: its own identity, and the root's
	// identity admitted. Required with Root.
	TLS *tls.Config
	// RootPEM is the root certificate agents trust (the root's ca.pem): every intermediate must
	// chain to it, and it is the CA of every answer. Required.
	RootPEM []byte
	// Fetch asks the root for an intermediate; nil: POST Root/intermediate over TLS.
	Fetch func(ctx context.Context, req signerapi.IntermediateRequest) (signerapi.IntermediateResponse, error)
	// Logger receives one line per renewal and per failure. Nil: none.
	Logger *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Rand is the randomness for keys and the jitter. Nil: crypto/rand.Reader.
	Rand io.Reader
	// Timeout bounds one request to the root. Zero means 10 s.
	Timeout time.Duration
}

// Node is a node signer's intermediate CA: it asks the root signer for one, renews it at two
// thirds of its lifetime with jitter, keeps the current one while renewals fail until it
// expires, and then has none (the node refuses to sign). Its key is made in memory for each
// intermediate and never leaves it.
type Node struct {
	cfg     NodeConfig
	root    *x509.Certificate
	rootPEM []byte
	pool    *x509.CertPool
	log     *slog.Logger
	now     func() time.Time
	rand    io.Reader
	fetch   func(ctx context.Context, req signerapi.IntermediateRequest) (signerapi.IntermediateResponse, error)
	http    *http.Client

	mu       sync.Mutex
	cur      *held     // guarded by mu: the intermediate held, nil before the first
	next     time.Time // guarded by mu: when to ask the root next
	renewed  time.Time // guarded by mu: the last intermediate received
	failed   time.Time // guarded by mu: the last failure, zero after a success
	lastErr  string    // guarded by mu: its cause
	failures int       // guarded by mu: failures in a row
}

// held is an intermediate with its key.
type held struct {
	ca      *CA
	got     time.Time // when the node received it
	renewAt time.Time
}

// NewNode returns a node for cfg; it asks the root for nothing until Step or Run.
func NewNode(cfg NodeConfig) (*Node, error) {
	block, rest := pem.Decode(cfg.RootPEM)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("node signer: the root certificate is not exactly one PEM certificate; give the root's ca.pem (signer ca-cert --ca DIR on the root)")
	}
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("node signer: the root certificate: %w", err)
	}
	if !root.IsCA || root.MaxPathLenZero || root.MaxPathLen == 0 {
		return nil, errors.New("node signer: the root certificate cannot sign intermediates (not a CA, or path length zero); give the ca.pem of a root made with `signer init --root`")
	}
	n := &Node{cfg: cfg, root: root, rootPEM: pem.EncodeToMemory(block), pool: x509.NewCertPool(), log: cfg.Logger, now: cfg.Now, rand: cfg.Rand, fetch: cfg.Fetch}
	n.pool.AddCert(root)
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.now == nil {
		n.now = time.Now
	}
	if n.rand == nil {
		n.rand = rand.Reader
	}
	if n.fetch == nil {
		u, err := url.Parse(cfg.Root)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || cfg.TLS == nil {
			return nil, fmt.Errorf("node signer: root URL %q: write https://HOST:PORT (the root signer's --tls-listen), with the node's identity for mutual TLS", cfg.Root)
		}
		timeout := cfg.Timeout
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		n.http = &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil, TLSClientConfig: cfg.TLS, TLSHandshakeTimeout: timeout, MaxIdleConns: 1, IdleConnTimeout: 30 * time.Second}}
		n.cfg.Root = "https://" + u.Host
		n.fetch = n.post
	}
	return n, nil
}

// RootPEM is the root certificate, the CA of every answer.
func (n *Node) RootPEM() []byte { return bytes.Clone(n.rootPEM) }

// Root is the root certificate. The caller must not modify it.
func (n *Node) Root() *x509.Certificate { return n.root }

// Current is the intermediate to sign with at now, nil when the node holds none valid then.
func (n *Node) Current(now time.Time) *CA {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil || !now.Before(n.cur.ca.cert.NotAfter) || now.Before(n.cur.ca.cert.NotBefore) {
		return nil
	}
	return n.cur.ca
}

// RenewAt is when a node renews an intermediate it received at got, valid until notAfter: at
// two thirds of the lifetime left at got, less a jitter of up to a tenth of it (j in [0, 1)),
// so that the nodes of a fleet do not all ask the root at once.
func RenewAt(got, notAfter time.Time, j float64) time.Time {
	life := notAfter.Sub(got)
	if life <= 0 {
		return got
	}
	return got.Add(life*2/3 - time.Duration(j*float64(life/10)))
}

// RetryAfter is how long a node waits after its failures-th failure in a row (1, 2, …) before
// asking the root again: while it holds an intermediate of lifetime life, a thirtieth of it;
// while it holds none (life 0), doubling from a second; always between a second and a minute,
// less a jitter of up to a fifth (j in [0, 1)).
func RetryAfter(life time.Duration, failures int, j float64) time.Duration {
	d := life / 30
	if life <= 0 {
		d = minRetry << min(max(failures-1, 0), 6)
	}
	d = min(max(d, minRetry), maxRetry)
	return d - time.Duration(j*float64(d/5))
}

// jitter is a number in [0, 1) read from the node's randomness.
func (n *Node) jitter() float64 {
	var b [8]byte
	if _, err := io.ReadFull(n.rand, b[:]); err != nil {
		return 0
	}
	return float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
}

// Run renews the intermediate (Step) until ctx ends.
func (n *Node) Run(ctx context.Context) {
	for {
		next := n.Step(ctx)
		t := time.NewTimer(max(next.Sub(n.now()), 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Step asks the root for a new intermediate when one is due (none held, or the renewal time of
// the one held is past, and so is the retry time after a failure), and returns when the next
// request is due.
func (n *Node) Step(ctx context.Context) time.Time {
	now := n.now()
	n.mu.Lock()
	next := n.next
	n.mu.Unlock()
	if now.Before(next) {
		return next
	}
	ca, err := n.request(ctx, now)
	j := n.jitter()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.failures++
		n.failed, n.lastErr = now, err.Error()
		var life time.Duration
		if n.cur != nil {
			life = n.cur.ca.cert.NotAfter.Sub(n.cur.got)
		}
		n.next = now.Add(RetryAfter(life, n.failures, j))
		if n.cur != nil && now.Before(n.cur.ca.cert.NotAfter) {
			n.log.Warn("intermediate renewal failed; signing with the current intermediate until it expires", logErr, err.Error(),
				logExpires, n.cur.ca.cert.NotAfter.UTC().Format(time.RFC3339), "retry", n.next.UTC().Format(time.RFC3339))
		} else {
			n.log.Error("no valid intermediate: refusing to sign until the root signer issues one", logErr, err.Error(), "retry", n.next.UTC().Format(time.RFC3339))
		}
		return n.next
	}
	h := &held{ca: ca, got: now, renewAt: RenewAt(now, ca.cert.NotAfter, j)}
	n.cur, n.renewed, n.failed, n.lastErr, n.failures, n.next = h, now, time.Time{}, "", 0, h.renewAt
	n.log.Info("intermediate renewed", "subject", ca.cert.Subject.String(), "sha256", CertSHA256(ca.cert),
		logExpires, ca.cert.NotAfter.UTC().Format(time.RFC3339), "renew_at", h.renewAt.UTC().Format(time.RFC3339))
	return n.next
}

// request makes a key, asks the root to certify it and checks the answer.
func (n *Node) request(ctx context.Context, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), n.rand)
	if err != nil {
		return nil, fmt.Errorf("generating the intermediate key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	resp, err := n.fetch(ctx, signerapi.IntermediateRequest{PublicKey: base64.StdEncoding.EncodeToString(der)})
	if err != nil {
		return nil, err
	}
	cert, certPEM, err := n.check(resp, key, now)
	if err != nil {
		return nil, fmt.Errorf("the root signer's intermediate does not check out: %w", err)
	}
	return &CA{cert: cert, certPEM: certPEM, key: key}, nil
}

// check accepts an intermediate only if it certifies key, is a CA of path length zero, chains
// to the configured root, and is valid now; the root it sends must be the configured one.
func (n *Node) check(resp signerapi.IntermediateResponse, key *ecdsa.PrivateKey, now time.Time) (*x509.Certificate, []byte, error) {
	rb, rest := pem.Decode([]byte(resp.Root))
	if rb == nil || rb.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 || !bytes.Equal(rb.Bytes, n.root.Raw) {
		return nil, nil, errors.New("the root signs with another root certificate than the one this node was given (--root-ca): give it the root's ca.pem")
	}
	block, rest := pem.Decode([]byte(resp.Certificate))
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, nil, errors.New("certificate is not exactly one PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case !key.PublicKey.Equal(cert.PublicKey):
		return nil, nil, errors.New("it certifies another key than the node's")
	case !cert.BasicConstraintsValid || !cert.IsCA || !cert.MaxPathLenZero:
		return nil, nil, errors.New("it is not a CA certificate of path length zero")
	case !now.Before(cert.NotAfter):
		return nil, nil, fmt.Errorf("it expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: n.pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, nil, err
	}
	return cert, pem.EncodeToMemory(block), nil
}

// post is Fetch over mutual TLS.
func (n *Node) post(ctx context.Context, ir signerapi.IntermediateRequest) (signerapi.IntermediateResponse, error) {
	var out signerapi.IntermediateResponse
	body, _ := json.Marshal(ir)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.Root+"/intermediate", bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.http.Do(req)
	if err != nil {
		return out, fmt.Errorf("root signer at %s: %w", n.cfg.Root, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRootAnswer+1))
	switch {
	case err != nil:
		return out, fmt.Errorf("root signer at %s: %w", n.cfg.Root, err)
	case len(data) > maxRootAnswer:
		return out, fmt.Errorf("root signer at %s: the answer is over %d bytes", n.cfg.Root, maxRootAnswer)
	case resp.StatusCode != http.StatusOK:
		msg := string(data)
		var er signerapi.ErrorResponse
		if json.Unmarshal(data, &er) == nil && er.Error != "" {
			msg = er.Error
		}
		return out, fmt.Errorf("root signer at %s answered %s: %s", n.cfg.Root, resp.Status, display.Line(msg, 200))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return out, fmt.Errorf("root signer at %s: unreadable answer: %w", n.cfg.Root, err)
	}
	return out, nil
}

// Health reports the intermediate held and the renewals, for GET /health.
func (n *Node) Health() *signerapi.IntermediateHealth {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := &signerapi.IntermediateHealth{Error: n.lastErr, Next: stamp(n.next), Renewed: stamp(n.renewed), Failed: stamp(n.failed)}
	if n.cur != nil {
		c := n.cur.ca.cert
		h.Subject, h.SHA256, h.NotAfter = c.Subject.String(), CertSHA256(c), stamp(c.NotAfter)
	}
	return h
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// noIntermediate is the public reason a node gives while it holds no valid intermediate.
func noIntermediate(h *signerapi.IntermediateHealth) string {
	var b strings.Builder
	b.WriteString("this node signer holds no valid intermediate from the root signer")
	if h.NotAfter != "" {
		b.WriteString(" (the last expired at " + h.NotAfter + ")")
	}
	if h.Error != "" {
		b.WriteString("; its last request failed: " + h.Error)
	}
	b.WriteString("; fix: let the node reach the root signer (--root) with an identity the root's --tls-node admits")
	return b.String()
}
