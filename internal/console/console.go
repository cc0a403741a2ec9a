// Package console owns the policy file: it loads and checks it, follows its edits, and serves
// the approved policy to the gate over a unix socket, and to a fleet's gates over mutual TLS.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/notify"
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
	// StatePath is the console's state file: the approved policy and the review decisions.
	// Empty: state in memory only (every start approves the file as it is).
	StatePath string
	// GateUIDs are the uids allowed to fetch the policy.
	GateUIDs []int
	Logger   *slog.Logger
	Audit    Auditor
	// Out receives the console's human-readable lines (policy loaded, rejected edits). Nil: none.
	Out io.Writer
	Now func() time.Time
	// Metrics counts the policies served and the rejected edits. Nil: nothing counted.
	Metrics *metrics.Console
	// AgentUIDs are the uids agents run as on this machine (lox run -- COMMAND passes its
	// agent's). With any, a policy whose [[notify]] channel has insecure_loopback is refused
	// (policy.RefusedWithAgent): the agent could bind the channel's port and approve its own
	// requests; such a channel of a policy approved before is never used. Empty: none.
	AgentUIDs []int
	// Bindings keeps the credential bindings where every replica of the console reads them (the
	// hub's database). Nil: in the state file.
	Bindings BindingStore
}

// The contract of the console's socket (consoleapi), named here for the console's own code.
type (
	Served = consoleapi.Served
	Status = consoleapi.Status
)

// Console serves the approved policy.
type Console struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	cur atomic.Pointer[Served]

	// bindMu orders the changes and rereads of the bindings in Config.Bindings.
	bindMu sync.Mutex

	mu       sync.Mutex
	lastSeen string // guarded by mu: the version (hash) of the file as last read
	fileErr  string // guarded by mu: the error of the file as last read, "" when it loaded
	hubAddr  string // guarded by mu: where the hosted hub listens
	phoneURL string // guarded by mu: the URL pairing links name
	metrics  string // guarded by mu: the URL of the metrics listener
	tlsAddr  string // guarded by mu: where gates fetch the policy over mutual TLS
	hubTLS   string // guarded by mu: where the hub serves gates and facades over mutual TLS

	gates map[string]*consoleapi.GateSeen // guarded by mu: each gate identity's last fetch

	notifyStatus func() []notify.ChannelStatus // guarded by mu: the channels' deliveries, or nil
	state        stateFile                     // guarded by mu: the approved policy and the review decisions
	approved     *policy.Policy                // guarded by mu: the approved policy, compiled
	review       *Review                       // guarded by mu: the file's loosening waiting for a human, or nil
}

// SetHub records the address of the hub this console hosts, for GET /status.
func (c *Console) SetHub(addr string) {
	c.mu.Lock()
	c.hubAddr = addr
	c.mu.Unlock()
}

// SetPhone records the URL pairing links name, for GET /status.
func (c *Console) SetPhone(url string) {
	c.mu.Lock()
	c.phoneURL = url
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
	if err := c.loadState(); err != nil {
		return nil, err
	}
	if cfg.Bindings != nil {
		if err := c.bindingsFromStore(); err != nil {
			return nil, err
		}
	}
	if c.state.Approved == nil {
		// The first start: the file the operator started the console with is approved.
		if err := c.firstStart(); err != nil {
			return nil, err
		}
	} else if err := c.approved.RefusedWithAgent(); err != nil && len(cfg.AgentUIDs) > 0 {
		c.say("the approved policy has a channel an agent on this machine could answer; it is not used until the policy file drops it:\n%s", err)
		c.log.Warn("approved policy: channels not used while an agent runs", "err", err.Error())
	}
	c.reload()
	return c, nil
}

// Current is the policy being served.
func (c *Console) Current() *Served { return c.cur.Load() }

// reload reads the file and, when it changed: an invalid file changes nothing; a file that is
// the approved policy or a tightening of it is served at once; a loosening waits for a human
// (Review). It reports whether a new policy is served. The file is read and hashed every time (it
// is small): a modification time can miss an edit made within its resolution.
func (c *Console) reload() (bool, error) {
	path := c.cfg.PolicyPath
	data, err := readPolicyFile(path)
	if err != nil {
		return false, c.fileError(err)
	}
	version := policy.Hash(data)
	c.mu.Lock()
	seen, approved := c.lastSeen, c.state.Approved
	c.lastSeen = version
	c.mu.Unlock()
	if approved != nil && approved.Version == version {
		c.mu.Lock()
		c.fileErr, c.review = "", nil
		c.mu.Unlock()
		return false, nil
	}
	if seen == version {
		return false, nil // already judged
	}
	p, err := c.load(path, data)
	if err != nil {
		c.mu.Lock()
		c.review = nil
		c.mu.Unlock()
		return false, c.fileError(err)
	}
	c.setFileErr("")
	c.mu.Lock()
	old := c.approved
	c.mu.Unlock()
	cmp := policy.Compare(old, p)
	if cmp.Tightening() {
		c.approve(p, data, "console (a tightening: applied without review)")
		if len(cmp.Tightenings) > 0 {
			c.say("policy %s applied: a tightening (%s)", short(version), strings.Join(cmp.Tightenings, "; "))
		} else {
			c.say("policy %s applied: decides as before", short(version))
		}
		return true, nil
	}
	r := &Review{Version: version, Name: path, Since: c.now(), Changes: cmp, Diff: lineDiff(approved.TOML, string(data)), text: data, policy: p}
	c.mu.Lock()
	for _, rj := range c.state.Rejected {
		if rj.Version == version {
			r.Rejected = &rj
		}
	}
	c.review = r
	c.mu.Unlock()
	if r.Rejected != nil {
		c.say("the policy file is %s, which was rejected by %s; the gate keeps the approved policy %s", short(version), r.Rejected.By, short(approved.Version))
	} else {
		c.say("the policy file has %d loosening change(s), so it waits for review (:review on the console's terminal); the gate keeps %s", len(cmp.Loosenings), short(approved.Version))
	}
	examples := make([]string, len(cmp.Examples))
	for i, e := range cmp.Examples {
		examples[i] = e.String()
	}
	c.log.Warn("policy loosening waits for review", "version", version, "loosenings", cmp.Loosenings, "examples", examples)
	return false, nil
}

// load loads a policy file's text, and refuses what this machine's agents forbid
// (Config.AgentUIDs).
func (c *Console) load(path string, data []byte) (*policy.Policy, error) {
	p, err := policy.Load(path, data)
	if err != nil {
		return nil, err
	}
	if len(c.cfg.AgentUIDs) > 0 {
		if err := p.RefusedWithAgent(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// readPolicyFile reads the policy file, bounded.
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	if len(data) > maxPolicyBytes {
		return nil, fmt.Errorf("policy file %s is larger than %d bytes; a policy file is never that large, check the path", path, maxPolicyBytes)
	}
	return data, nil
}

// firstStart approves the policy file as it is: the operator chose it by starting the console.
func (c *Console) firstStart() error {
	data, err := readPolicyFile(c.cfg.PolicyPath)
	if err != nil {
		return err
	}
	p, err := c.load(c.cfg.PolicyPath, data)
	if err != nil {
		return err
	}
	c.approve(p, data, "operator (first start of the console with this file)")
	c.say("policy %s approved: the first start with %s", short(p.Version), c.cfg.PolicyPath)
	return nil
}

// approve makes p (with its text) the approved, served policy, writes the state and audits it.
func (c *Console) approve(p *policy.Policy, data []byte, by string) {
	now := c.now()
	c.mu.Lock()
	prev := ""
	if c.state.Approved != nil {
		prev = c.state.Approved.Version
	}
	c.state.Approved = &Approved{Version: p.Version, Name: c.cfg.PolicyPath, TOML: string(data), By: by, At: now}
	c.approved = p
	c.review = nil
	c.mu.Unlock()
	if err := c.saveState(); err != nil {
		c.log.Error("console: writing the state file failed", "err", err)
	}
	c.publish(Served{Version: p.Version, Name: c.cfg.PolicyPath, TOML: string(data), LoadedAt: now, Rules: p.RuleCount()})
	c.cfg.Metrics.Served(p.Version, now)
	c.record(&audit.Record{Event: "policy", Verdict: "", Rule: "approved", Policy: p.Version, Approver: by,
		Detail: fmt.Sprintf("approved %s; previous %s", c.cfg.PolicyPath, prev)})
}

func (c *Console) fileError(err error) error {
	msg := err.Error()
	c.mu.Lock()
	changed := c.fileErr != msg
	c.fileErr = msg
	c.mu.Unlock()
	if changed {
		c.cfg.Metrics.ReloadFailed()
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
			c.RefreshBindings()
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
	etag := `"` + s.Tag + `"`
	w.Header().Set("ETag", etag)
	if id, ok := mtls.PeerOf(r); ok {
		// What the gate holds once this answer reaches it: the served policy, confirmed by a 304
		// or sent.
		c.sawGate(id, instanceOf(r), r.RemoteAddr, s)
	}
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
	st.FileError, st.Hub, st.File, st.Metrics, st.Phone = c.fileErr, c.hubAddr, c.lastSeen, c.metrics, c.phoneURL
	st.TLS, st.HubTLS = c.tlsAddr, c.hubTLS
	if len(c.gates) > 0 {
		st.Gates = c.gatesSeenLocked()
	}
	if a := c.state.Approved; a != nil {
		st.ApprovedBy, st.ApprovedAt = a.By, a.At
		st.Differs = c.lastSeen != "" && c.lastSeen != a.Version
	}
	if c.review != nil {
		st.Review = c.review.Version
	}
	ns := c.notifyStatus
	c.mu.Unlock()
	if ns != nil {
		st.Notify = ns()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

// ReviewWaiting reports whether the file holds a loosening waiting for a human (not one that
// was rejected).
func (c *Console) ReviewWaiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.review != nil && c.review.Rejected == nil
}

// SetMetrics records the URL of the console's metrics listener, for GET /status.
func (c *Console) SetMetrics(url string) {
	c.mu.Lock()
	c.metrics = url
	c.mu.Unlock()
}

// NotifyChannels are the approved policy's [[notify]] channels; with an agent on this machine
// (Config.AgentUIDs), without those that have insecure_loopback: they neither notify nor decide.
func (c *Console) NotifyChannels() []policy.Notify {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.approved == nil {
		return nil
	}
	all := c.approved.Notify()
	if len(c.cfg.AgentUIDs) == 0 {
		return all
	}
	out := make([]policy.Notify, 0, len(all))
	for _, n := range all {
		if !n.InsecureLoopback {
			out = append(out, n)
		}
	}
	return out
}

// SetNotifyStatus gives the function GET /status reads the channels' deliveries from.
func (c *Console) SetNotifyStatus(f func() []notify.ChannelStatus) {
	c.mu.Lock()
	c.notifyStatus = f
	c.mu.Unlock()
}
