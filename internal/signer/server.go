package signer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/signerapi"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// MaxRequestBytes bounds the body of POST /sign.
const MaxRequestBytes = 16 << 10

// Defaults of ServerConfig.
const (
	DefaultRate  = 20.0
	DefaultBurst = 100
)

// The contract of the signer's socket (signerapi), named here for the signer's own code.
type (
	SignRequest   = signerapi.SignRequest
	SignResponse  = signerapi.SignResponse
	Health        = signerapi.Health
	ErrorResponse = signerapi.ErrorResponse
)

// Log field names.
const (
	logHost    = "host"
	logSerial  = "serial"
	logUID     = "uid"
	logGID     = "gid"
	logPID     = "pid"
	logPeer    = "peer" // a gate's identity, over mutual TLS
	logOutcome = "outcome"
	logReason  = "reason"
	logErr     = "err"
	logExpires = "not_after"
)

// ServerConfig is what a Server needs.
type ServerConfig struct {
	// CA signs the certificates. Required unless Node is set.
	CA *CA
	// Node, for a node signer, holds the intermediate that signs instead of CA: while it holds
	// none valid, POST /sign and GET /health answer 503. Nil: CA signs.
	Node *Node
	// AllowUIDs are the uids (the gate's) that may ask for certificates; no uid means nobody.
	AllowUIDs []int
	// HealthUIDs are uids whose connections are closed like every refused one, but without a log
	// line: the health check's (signer health), which only asks whether the socket accepts. The
	// signer's own uid is the one to give: it reads the CA key anyway. Nil: none.
	HealthUIDs []int
	// Logger receives one line per request and one per refused connection. Nil: none.
	Logger *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Rand is the randomness for serial numbers and signatures. Nil: crypto/rand.Reader.
	Rand io.Reader
	// Rate is how many certificates a second the signer issues, across all callers, on
	// average. Zero means DefaultRate.
	Rate float64
	// Burst is how many certificates the signer issues at once before Rate applies. Zero means
	// DefaultBurst.
	Burst int
	// ReadHeaderTimeout bounds the wait for a request's header in Serve. Zero means 5s.
	ReadHeaderTimeout time.Duration
	// Metrics counts the sign requests by outcome and the signing time. Nil: nothing counted.
	Metrics *metrics.Signer
	// MetricsURL is where the metrics are served on TCP (--metrics-listen), for GET /health.
	// Empty: nowhere.
	MetricsURL string
	// Registry is served at GET /metrics on the socket, to the allowed uids like every route: how
	// a signer with no network exports its metrics (the gate reads them and serves them with its
	// own, metrics.ImportSigner). Nil: /metrics is not served.
	Registry *metrics.Registry
}

// Server serves certificates over HTTP: POST /sign, GET /health and GET /metrics.
type Server struct {
	ca     *CA
	node   *Node
	uids   []int
	health []int
	log    *slog.Logger
	now    func() time.Time
	rand   io.Reader
	bucket *bucket
	rht    time.Duration
	m      *metrics.Signer
	murl   string
	reg    *metrics.Registry
}

// NewServer returns a server for cfg. It panics if cfg.CA and cfg.Node are both nil.
func NewServer(cfg ServerConfig) *Server {
	if cfg.CA == nil && cfg.Node == nil {
		panic("signer.NewServer: ServerConfig.CA is nil (and so is Node)")
	}
	s := &Server{ca: cfg.CA, node: cfg.Node, uids: slices.Clone(cfg.AllowUIDs), health: slices.Clone(cfg.HealthUIDs), log: cfg.Logger, now: cfg.Now, rand: cfg.Rand, rht: cfg.ReadHeaderTimeout, m: cfg.Metrics, murl: cfg.MetricsURL, reg: cfg.Registry}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	if s.rht == 0 {
		s.rht = 5 * time.Second
	}
	s.bucket = bucketOr(cfg.Rate, cfg.Burst, DefaultRate, DefaultBurst)
	return s
}

// Handler serves POST /sign, GET /health and, with a Registry, GET /metrics to peers whose uid
// is allowed (read by unixsock.ConnContext, which the http.Server must use); other peers get 403.
func (s *Server) Handler() http.Handler {
	return unixsock.RequireUID(s.uids, s.routes(), func(r *http.Request, p unixsock.Peer, err error) {
		if err != nil {
			s.log.Warn("request refused: no peer credentials", logErr, err.Error(), "path", r.URL.Path)
			return
		}
		s.log.Warn("request refused: uid not allowed", logUID, p.UID, logGID, p.GID, logPID, p.PID, "path", r.URL.Path)
	})
}

type callerKey struct{}

// FleetHandler serves the routes of Handler to the gates of a fleet over mutual TLS: admitted
// names the identity a request's certificate proved, ok false for one the signer does not serve
// (403). The http.Server is one of the caller's, on a listener of mutual TLS.
func (s *Server) FleetHandler(admitted func(r *http.Request) (id string, ok bool)) http.Handler {
	routes := s.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := admitted(r)
		if !ok {
			s.log.Warn("request refused: identity not admitted", logPeer, id, "path", r.URL.Path)
			writeError(w, http.StatusForbidden, "forbidden: the signer serves the gates it is configured for")
			return
		}
		routes.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, id)))
	})
}

// routes are the signer's routes, for whoever the handler around them admitted.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/sign", s.serveSign)
	mux.HandleFunc("/health", s.serveHealth)
	routes := "POST /sign and GET /health"
	if s.reg != nil {
		mux.HandleFunc(metrics.Path, serveMetrics(s.reg.Handler()))
		routes = "POST /sign, GET /health and GET " + metrics.Path
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint; the signer serves "+routes)
	})
	return mux
}

// Serve serves Handler on l until ctx ends, then shuts down (waiting up to 3 s for requests in
// flight) and returns nil. Connections from uids not allowed are closed as they are accepted
// (AllowUIDs). It closes l.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ConnContext:       unixsock.ConnContext,
		ReadHeaderTimeout: s.rht,
		ReadTimeout:       s.rht + 10*time.Second,
		WriteTimeout:      s.rht + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	stopped := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-served:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
	err := srv.Serve(&uidListener{Listener: l, uids: s.uids, quiet: s.health, log: s.log})
	close(served)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) serveSign(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "use POST /sign")
		return
	}
	var log *slog.Logger
	if id, ok := r.Context().Value(callerKey{}).(string); ok {
		log = s.log.With(logPeer, id)
	} else {
		peer, _ := unixsock.PeerFrom(r.Context())
		log = s.log.With(logUID, peer.UID, logPID, peer.PID)
	}
	now := s.now()
	if ok, wait := s.bucket.take(now); !ok {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		log.Warn("sign", logOutcome, "rate-limited")
		s.m.Signed(metrics.SignRateLimited, 0)
		writeError(w, http.StatusTooManyRequests, "the signer is issuing certificates faster than its rate limit; retry after the Retry-After seconds")
		return
	}
	var req SignRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			log.Warn("sign", logOutcome, "bad-request", logReason, "body too large")
			s.m.Signed(metrics.SignBadRequest, 0)
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", MaxRequestBytes))
			return
		}
		log.Warn("sign", logOutcome, "bad-request", logReason, err.Error())
		s.m.Signed(metrics.SignBadRequest, 0)
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error()+`; send {"host":"...","public_key":"<base64 of PKIX DER>"}`)
		return
	}
	pub, err := parsePublicKey(req.PublicKey)
	if err != nil {
		log.Warn("sign", logOutcome, "bad-request", logHost, display.Truncate(req.Host, maxShownHost), logReason, err.Error())
		s.m.Signed(metrics.SignBadRequest, 0)
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ca, root, chain := s.ca, "", ""
	if s.node != nil {
		if ca = s.node.Current(now); ca == nil {
			h := s.node.Health()
			log.Error("sign", logOutcome, "no-intermediate", logHost, display.Truncate(req.Host, maxShownHost), logReason, h.Error)
			s.m.Signed(metrics.SignFailed, 0)
			writeError(w, http.StatusServiceUnavailable, noIntermediate(h))
			return
		}
		root, chain = string(s.node.rootPEM), string(ca.certPEM)
	} else {
		root = string(ca.certPEM)
	}
	start := time.Now()
	cert, der, err := Sign(ca, req.Host, pub, now, s.rand)
	took := time.Since(start)
	if err != nil {
		var ge *GuardError
		if errors.As(err, &ge) {
			log.Warn("sign", logOutcome, "refused", logHost, display.Truncate(req.Host, maxShownHost), logReason, err.Error())
			s.m.Signed(metrics.SignRefused, 0)
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		log.Error("sign", logOutcome, "failed", logHost, req.Host, logErr, err.Error())
		s.m.Signed(metrics.SignFailed, 0)
		writeError(w, http.StatusInternalServerError, "signing failed; see the signer's log")
		return
	}
	resp := SignResponse{
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		CA:          root,
		Chain:       chain,
		Serial:      cert.SerialNumber.Text(16),
		NotAfter:    cert.NotAfter.UTC().Format(time.RFC3339),
	}
	log.Info("sign", logOutcome, "issued", logHost, req.Host, logSerial, resp.Serial, logExpires, resp.NotAfter)
	s.m.Signed(metrics.SignIssued, took)
	httpjson.Write(w, http.StatusOK, resp)
}

// parsePublicKey reads the public_key field.
func parsePublicKey(b64 string) (any, error) {
	if b64 == "" {
		return nil, errors.New("public_key is empty; send the base64 of the key's PKIX DER")
	}
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("public_key is not standard base64; send the base64 of the key's PKIX DER")
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("public_key is not a PKIX public key: %v", err)
	}
	return pub, nil
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "use GET /health")
		return
	}
	if s.node != nil {
		h := s.node.Health()
		status := http.StatusOK
		if s.node.Current(s.now()) == nil {
			status = http.StatusServiceUnavailable
		}
		root := s.node.root
		httpjson.Write(w, status, Health{CANotAfter: stamp(root.NotAfter), CASubject: root.Subject.String(), CASHA256: CertSHA256(root),
			Metrics: s.murl, Role: RoleNode, Intermediate: h})
		return
	}
	httpjson.Write(w, http.StatusOK, Health{
		CANotAfter: s.ca.cert.NotAfter.UTC().Format(time.RFC3339),
		CASubject:  s.ca.cert.Subject.String(),
		CASHA256:   CertSHA256(s.ca.cert),
		Metrics:    s.murl,
	})
}

// The roles of Health.Role.
const (
	RoleRoot = "root"
	RoleNode = "node"
)

// serveMetrics answers GET /metrics with h (the registry's page); nothing but GET and HEAD.
func serveMetrics(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "use GET "+metrics.Path)
			return
		}
		h.ServeHTTP(w, r)
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	httpjson.Write(w, status, ErrorResponse{Error: msg})
}

// AllowUIDs wraps l so that Accept returns only connections from the given uids (read with
// SO_PEERCRED). Every other connection is closed at once and logged (uid, gid, pid), and Accept
// goes on accepting.
func AllowUIDs(l net.Listener, uids []int, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &uidListener{Listener: l, uids: slices.Clone(uids), log: log}
}

type uidListener struct {
	net.Listener
	uids  []int
	quiet []int // refused without a log line (the health check's uid)
	log   *slog.Logger
}

func (l *uidListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := unixsock.PeerOf(c)
		if err != nil {
			c.Close()
			l.log.Warn("connection refused: no peer credentials", logErr, err.Error())
			continue
		}
		if !slices.Contains(l.uids, p.UID) {
			c.Close()
			if slices.Contains(l.quiet, p.UID) {
				continue
			}
			l.log.Warn("connection refused: uid not allowed", logUID, p.UID, logGID, p.GID, logPID, p.PID)
			continue
		}
		return c, nil
	}
}

// CertSHA256 is the SHA-256 of a certificate's DER, in hex: how the doctor and the logs name a CA.
func CertSHA256(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}
