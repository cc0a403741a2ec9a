// Package console owns the policy file: it loads and checks it, follows its edits, and serves
// the approved policy to the gate over a unix socket.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// maxPolicyBytes bounds a policy file read.
const maxPolicyBytes = 4 << 20

// Auditor keeps the console's audit records (policy loads, refused peers).
type Auditor interface {
	Write(ctx context.Context, r *audit.Record) error
}

// Config is what a Console needs.
type Config struct {
	// PolicyPath is the policy file.
	PolicyPath string
	// GateUIDs are the uids allowed to fetch the policy.
	GateUIDs []int
	Logger   *slog.Logger
	Audit    Auditor
	// Out receives the console's human-readable lines (policy loaded, rejected edits). Nil: none.
	Out io.Writer
	Now func() time.Time
}

// Served is the policy as the console serves it: GET /policy answers it as JSON.
type Served struct {
	Version  string    `json:"version"`
	Name     string    `json:"name"`
	TOML     string    `json:"toml"`
	LoadedAt time.Time `json:"loaded_at"`
	Rules    int       `json:"rules"`
}

// Status is GET /status.
type Status struct {
	Version   string    `json:"version"`
	Name      string    `json:"name"`
	LoadedAt  time.Time `json:"loaded_at"`
	FileError string    `json:"file_error,omitempty"` // why the file as it is now is not served
	// Hub is the address the hub listens on, when the console hosts one.
	Hub string `json:"hub,omitempty"`
}

// Console serves the approved policy.
type Console struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	cur atomic.Pointer[Served]

	mu       sync.Mutex
	lastSeen string // guarded by mu: the version (hash) of the file as last read
	fileErr  string // guarded by mu: the error of the file as last read, "" when it loaded
	hubAddr  string // guarded by mu: where the hosted hub listens
}

// SetHub records the address of the hub this console hosts, for GET /status.
func (c *Console) SetHub(addr string) {
	c.mu.Lock()
	c.hubAddr = addr
	c.mu.Unlock()
}

// New loads the policy file; an invalid file is an error naming line, key and fix.
func New(cfg Config) (*Console, error) {
	c := &Console{cfg: cfg, log: cfg.Logger, now: cfg.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Current is the policy being served.
func (c *Console) Current() *Served { return c.cur.Load() }

// reload reads the file and serves it if it changed and loads; it reports whether a new policy
// is served. The file is read and hashed every time (it is small): a modification time can miss
// an edit made within its resolution.
func (c *Console) reload() (bool, error) {
	path := c.cfg.PolicyPath
	f, err := os.Open(path)
	if err != nil {
		return false, c.fileError(fmt.Errorf("policy file: %w", err))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	f.Close()
	if err != nil {
		return false, c.fileError(fmt.Errorf("policy file %s: %w", path, err))
	}
	if len(data) > maxPolicyBytes {
		return false, c.fileError(fmt.Errorf("policy file %s is larger than %d bytes; a policy file is never that large, check the path", path, maxPolicyBytes))
	}
	version := policy.Hash(data)
	c.mu.Lock()
	seen := c.lastSeen
	c.lastSeen = version
	c.mu.Unlock()
	if cur := c.cur.Load(); cur != nil && cur.Version == version {
		c.setFileErr("")
		return false, nil
	}
	if seen == version {
		return false, nil // the same invalid text as last time: already reported
	}
	p, err := policy.Load(path, data)
	if err != nil {
		return false, c.fileError(err)
	}
	s := &Served{Version: version, Name: path, TOML: string(data), LoadedAt: c.now(), Rules: p.RuleCount()}
	old := c.cur.Swap(s)
	c.setFileErr("")
	from := ""
	if old != nil {
		from = old.Version
	}
	c.say("policy %s loaded from %s (%d rules)", short(version), path, p.RuleCount())
	c.record(&audit.Record{Event: "policy", Verdict: "", Rule: "load", Policy: version,
		Detail: fmt.Sprintf("loaded %s; previous %s", path, from)})
	return true, nil
}

func (c *Console) fileError(err error) error {
	msg := err.Error()
	c.mu.Lock()
	changed := c.fileErr != msg
	c.fileErr = msg
	c.mu.Unlock()
	if changed {
		if c.cur.Load() != nil {
			c.say("policy file rejected, still serving %s:\n%s", short(c.cur.Load().Version), msg)
		}
		c.log.Warn("policy file rejected", "err", msg)
	}
	return err
}

func (c *Console) setFileErr(s string) {
	c.mu.Lock()
	c.fileErr = s
	c.mu.Unlock()
}

func (c *Console) say(format string, args ...any) {
	if c.cfg.Out != nil {
		fmt.Fprintf(c.cfg.Out, "console: "+format+"\n", args...)
	}
}

func (c *Console) record(r *audit.Record) {
	if c.cfg.Audit == nil {
		return
	}
	r.Time = c.now()
	if err := c.cfg.Audit.Write(context.Background(), r); err != nil {
		c.log.Error("audit write failed", "err", err)
	}
}

func short(version string) string {
	if len(version) > 19 {
		return version[:19]
	}
	return version
}

// Watch follows the policy file until ctx ends, checking it every interval.
func (c *Console) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.reload()
		}
	}
}

// Handler serves GET /policy and GET /status to the gate's uids; every other peer gets 403 and
// an audit record.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /policy", c.servePolicy)
	mux.HandleFunc("GET /status", c.serveStatus)
	return unixsock.RequireUID(c.cfg.GateUIDs, mux, func(r *http.Request, p unixsock.Peer, err error) {
		detail := fmt.Sprintf("peer uid %d pid %d refused on %s %s", p.UID, p.PID, r.Method, r.URL.Path)
		if err != nil {
			detail = "peer without credentials refused: " + err.Error()
		}
		c.log.Warn("console: peer refused", "uid", p.UID, "pid", p.PID, "path", r.URL.Path)
		c.record(&audit.Record{Event: "peer-refused", Status: http.StatusForbidden, Detail: detail})
	})
}

func (c *Console) servePolicy(w http.ResponseWriter, r *http.Request) {
	s := c.cur.Load()
	if s == nil {
		http.Error(w, "no valid policy loaded", http.StatusServiceUnavailable)
		return
	}
	etag := `"` + s.Version + `"`
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s)
}

func (c *Console) serveStatus(w http.ResponseWriter, r *http.Request) {
	st := Status{}
	if s := c.cur.Load(); s != nil {
		st.Version, st.Name, st.LoadedAt = s.Version, s.Name, s.LoadedAt
	}
	c.mu.Lock()
	st.FileError, st.Hub = c.fileErr, c.hubAddr
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}
