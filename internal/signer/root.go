package signer

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/signerapi"
)

// MaxIntermediateRequestBytes bounds the body of a root signer's POST /intermediate.
const MaxIntermediateRequestBytes = 4 << 10

// Defaults of RootConfig: a node asks at two thirds of its intermediate's life, so a fleet of
// hundreds of nodes asks a few times a minute.
const (
	DefaultRootRate  = 5.0
	DefaultRootBurst = 50
)

// RootConfig is what a RootServer needs.
type RootConfig struct {
	// CA is the root (CheckRoot passes). Required.
	CA *CA
	// Policy is what goes in every intermediate.
	Policy RootPolicy
	// Logger receives one line per request. Nil: none.
	Logger *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Rand is the randomness for serial numbers and signatures. Nil: crypto/rand.Reader.
	Rand io.Reader
	// Rate and Burst bound the intermediates issued, across all nodes. Zero: the defaults.
	Rate  float64
	Burst int
}

// RootServer is a root signer: it holds the root key and signs intermediates for the node
// signers its caller admits over mutual TLS, nothing else (no leaf, no unix socket).
type RootServer struct {
	ca     *CA
	policy RootPolicy
	log    *slog.Logger
	now    func() time.Time
	rand   io.Reader
	bucket *bucket
}

// NewRootServer returns a root server for cfg. It panics if cfg.CA is nil.
func NewRootServer(cfg RootConfig) *RootServer {
	if cfg.CA == nil {
		panic("signer.NewRootServer: RootConfig.CA is nil")
	}
	s := &RootServer{ca: cfg.CA, policy: cfg.Policy, log: cfg.Logger, now: cfg.Now, rand: cfg.Rand}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	s.bucket = bucketOr(cfg.Rate, cfg.Burst, DefaultRootRate, DefaultRootBurst)
	return s
}

// Handler serves POST /intermediate and GET /health to the node signers admitted names as
// admitted (the identity a request's certificate proved, ok false for one not on the root's
// list: 403, nothing signed). The http.Server is the caller's, on a listener of mutual TLS.
func (s *RootServer) Handler(admitted func(r *http.Request) (id string, ok bool)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/intermediate", s.serveIntermediate)
	mux.HandleFunc("/health", s.serveHealth)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint; a root signer serves POST /intermediate and GET /health only: it signs no leaf")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := admitted(r)
		if !ok {
			s.log.Warn("request refused: identity not on the root's list", logPeer, id, "path", r.URL.Path)
			writeError(w, http.StatusForbidden, "forbidden: the root signer issues intermediates to the node signers its --tls-node lists")
			return
		}
		mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, id)))
	})
}

// pemCert is a certificate's DER in PEM.
func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (s *RootServer) serveIntermediate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "use POST /intermediate")
		return
	}
	id, _ := r.Context().Value(callerKey{}).(string)
	log := s.log.With(logPeer, id)
	now := s.now()
	if ok, wait := s.bucket.take(now); !ok {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		log.Warn("intermediate", logOutcome, "rate-limited")
		writeError(w, http.StatusTooManyRequests, "the root signer is issuing intermediates faster than its rate limit; retry after the Retry-After seconds")
		return
	}
	var req signerapi.IntermediateRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxIntermediateRequestBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", MaxIntermediateRequestBytes))
			return
		}
		log.Warn("intermediate", logOutcome, "bad-request", logReason, err.Error())
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error()+`; send {"public_key":"<base64 of PKIX DER>"}`)
		return
	}
	pub, err := parsePublicKey(req.PublicKey)
	if err != nil {
		log.Warn("intermediate", logOutcome, "bad-request", logReason, err.Error())
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cert, der, err := IssueIntermediate(s.ca, id, pub, s.policy, now, s.rand)
	if err != nil {
		var ge *GuardError
		if errors.As(err, &ge) {
			log.Warn("intermediate", logOutcome, "refused", logReason, err.Error())
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		log.Error("intermediate", logOutcome, "failed", logErr, err.Error())
		writeError(w, http.StatusInternalServerError, "signing failed; see the root signer's log")
		return
	}
	log.Info("intermediate", logOutcome, "issued", logSerial, cert.SerialNumber.Text(16), logExpires, stamp(cert.NotAfter))
	httpjson.Write(w, http.StatusOK, signerapi.IntermediateResponse{
		Certificate: string(pemCert(der)),
		Root:        string(s.ca.certPEM),
	})
}

func (s *RootServer) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "use GET /health")
		return
	}
	httpjson.Write(w, http.StatusOK, Health{CANotAfter: stamp(s.ca.cert.NotAfter), CASubject: s.ca.cert.Subject.String(),
		CASHA256: CertSHA256(s.ca.cert), Role: RoleRoot})
}
