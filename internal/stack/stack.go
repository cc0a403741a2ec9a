// Package stack runs lockhttp's local stack (the signer, the console and the gate, each its own
// process, and optionally the agent's command as a uid of its own), describes it in up.json and
// stops it cleanly.
package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/buildinfo"
	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/enclosure"
	"github.com/lockhttp/lockhttp/internal/gateapi"
	"github.com/lockhttp/lockhttp/internal/gatefiles"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/unixsock"
	shipped "github.com/lockhttp/lockhttp/policy"
)

// Options configure Run.
type Options struct {
	// StateDir holds up.json, the sockets, the audit and the logs. Created 0700.
	StateDir string
	// PolicyPath is the policy file. Empty: StateDir/policy.toml, written from the shipped default
	// when it does not exist.
	PolicyPath string
	// Listen is the gate's proxy address.
	Listen string
	// Upstream is an upstream proxy for the gate (http://host:port, never with user info);
	// empty: direct.
	Upstream string
	// UpstreamCredentialsFile holds the upstream proxy's credential (user:password), given to
	// the gate by its path. Empty: the gate reads LOCKHTTP_UPSTREAM_PROXY_AUTH from the
	// environment lox passes it, else none.
	UpstreamCredentialsFile string
	// Roots is a PEM file of extra roots the gate trusts for origins; empty: the system roots.
	Roots string
	// Secrets is the gate's secrets file (the credentials [[inject]] rules add). Empty: none,
	// or StateDir/secrets.toml with ClaudeKeyFile.
	Secrets string
	// ClaudeKeyFile holds a Claude API key (one line). Run puts it in the secrets file as the
	// secret "anthropic" (gatefiles.Put; Secrets, or StateDir/secrets.toml when Secrets is
	// empty), and gives an Agent ANTHROPIC_API_KEY=ClaudePlaceholder. Empty: none.
	ClaudeKeyFile string
	// HubListen is the hub's TCP address (the gate and the facades reach it there).
	HubListen string
	// PhoneURL is the URL a phone reaches the hub at. Empty: http:// and HubListen (which
	// must then be an address the phone can reach).
	PhoneURL string
	// MetricsListen is where the processes serve Prometheus metrics (see metricsArgs). Empty:
	// nowhere.
	MetricsListen string
	// OTLPEndpoint is the OTLP/HTTP collector the gate exports a span of every request to
	// (CheckOTLPEndpoint). Empty: no traces.
	OTLPEndpoint string
	// BinDir holds the gate and console binaries. Empty: the running executable's directory,
	// then PATH.
	BinDir string
	// Headless runs without the terminal UI: the console's lines and the banner go to Stdout.
	Headless bool
	// Follow prints a line per audit record (headless only).
	Follow bool
	// RestartDelay is how long lox waits before it restarts a process of the stack that exited
	// for the first time within a minute; each further exit within the minute doubles it, and
	// the fifth stops the stack (restarts.Limit, restarts.Window). Zero: DefaultRestartDelay.
	RestartDelay time.Duration
	// Agent, when set, is a command started once the stack is up, as a uid of its own, in a
	// network enclosure of its own; the stack stops when it exits. It implies Headless, and lox's
	// own lines go to Stderr: the command has Stdout.
	Agent *Agent
	// Enclosure configures the Agent's network enclosure (enclosure.Create): the subnet its /30
	// comes from (zero: enclosure.DefaultSubnet).
	Enclosure enclosure.Config
	Stdout    io.Writer
	Stderr    io.Writer
}

// Up is up.json: how to reach the running stack.
type Up struct {
	Gate          string         `json:"gate"` // the proxy URL
	Listen        string         `json:"listen"`
	AuditDir      string         `json:"audit_dir"`
	ConsoleAudit  string         `json:"console_audit_dir"`
	ConsoleSocket string         `json:"console_socket"`
	GateSocket    string         `json:"gate_socket"`
	SignerSocket  string         `json:"signer_socket"`
	CACert        string         `json:"ca_cert"`       // the CA certificate agents trust (ca.pem)
	Hub           string         `json:"hub"`           // the hub's URL
	HubCLIToken   string         `json:"hub_cli_token"` // the token file of lox's commands
	Policy        string         `json:"policy"`
	StateDir      string         `json:"state_dir"`
	Logs          string         `json:"logs"`
	PIDs          map[string]int `json:"pids"`
	// Metrics maps each process (gate, console, signer) to the URL of its Prometheus metrics;
	// absent without --metrics-listen.
	Metrics map[string]string `json:"metrics,omitempty"`
	Started time.Time         `json:"started"`
	// Version is the build of the lox that started the stack (buildinfo.Info.String), which
	// starts the signer, console and gate found next to it.
	Version string `json:"version"`
	// Restarts are the processes lox restarted since the stack started ("signer", "console",
	// "gate"): how often, and how each last exited. A process that never exited is not in it.
	Restarts map[string]restarts.Tally `json:"restarts,omitempty"`
	// Enclosure is the agent's network enclosure under lox run --; absent without a command.
	Enclosure *UpEnclosure `json:"enclosure,omitempty"`
	// CABundle is the system roots followed by ca.pem (BundleFile), for the variables that
	// replace a runtime's roots of an agent started by hand (lox env).
	CABundle string `json:"ca_bundle"`
	// Secrets is the gate's secrets file (--secrets, or the one --claude-key-file writes);
	// absent without one.
	Secrets string `json:"secrets,omitempty"`
}

// UpFile is the name of up.json in the state directory.
const UpFile = "up.json"

type child struct {
	name    string
	cmd     *exec.Cmd
	pid     int
	log     string // the log file its stderr goes to
	logFrom int64  // the log's size when it started: this run's lines follow
	done    chan struct{}
	// Set before done is closed: how it exited (cmd.Wait's error), and when.
	err      error
	exitedAt time.Time
}

// defaultHubListen is the hub's address when Options.HubListen is empty.
const defaultHubListen = "127.0.0.1:3131"

// Run starts the stack, writes up.json when the gate is deciding with the console's policy, and
// runs until ctx ends; then it stops the processes and removes up.json. A process of the stack
// that exits is restarted (supervisor); one that exits restarts.Limit times within
// restarts.Window stops the stack, and Run returns an error with its last lines. Without
// Headless, the person quitting the console's terminal UI stops the stack too. With an Agent it
// runs until the agent's command exits, and returns an *ExitError when that did not succeed.
func Run(ctx context.Context, o Options) error {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	out := o.Stdout // lox's own lines and the console's
	if o.Agent != nil {
		out, o.Headless = o.Stderr, true
	}
	state, err := filepath.Abs(o.StateDir)
	if err != nil {
		return err
	}
	if !o.Headless {
		// The console's terminal UI takes this process's terminal.
		if err := checkTerminal(os.Stdin, os.Stdout); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	lock, err := lockState(state)
	if err != nil {
		return err
	}
	defer lock.Close()
	// Holding the lock, this process is the directory's one stack: an up.json there was left by
	// a stack that ended without removing it (killed), and names sockets nobody serves.
	os.Remove(filepath.Join(state, UpFile))
	// The CA is made on the first start only: half a CA is refused before anything else is
	// touched, with the fix (restore from the backup, or replace it on purpose).
	caDir := filepath.Join(state, "ca")
	createCA, err := checkCA(caDir)
	if err != nil {
		return err
	}
	for _, d := range []string{filepath.Join(state, "logs"), filepath.Join(state, "audit"), filepath.Join(state, "console-audit")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
	}
	if o.ClaudeKeyFile != "" {
		if err := claudeKey(&o, state); err != nil {
			return err
		}
	}
	var ag *agentRun
	if o.Agent != nil {
		if ag, err = checkAgent(o.Agent, state, o.Stderr); err != nil {
			return err
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		quit := make(chan struct{})
		defer close(quit)
		go ag.watch(o.Agent.Signals, cancel, quit)
		defer ag.cleanup()
	}
	polPath, err := policyFile(state, o.PolicyPath)
	if err != nil {
		return err
	}
	if ag != nil {
		if err := checkAgentReads(o, state, polPath, ag.a.UID, ag.gid); err != nil {
			return err
		}
	}
	bins, err := findBinaries(o.BinDir, "gate", "console", "signer")
	if err != nil {
		return err
	}
	up := &Up{
		AuditDir:      filepath.Join(state, "audit"),
		ConsoleAudit:  filepath.Join(state, "console-audit"),
		ConsoleSocket: filepath.Join(state, "console.sock"),
		GateSocket:    filepath.Join(state, "gate.sock"),
		SignerSocket:  filepath.Join(state, "signer.sock"),
		CACert:        filepath.Join(state, "ca", "ca.pem"),
		CABundle:      filepath.Join(state, BundleFile),
		HubCLIToken:   filepath.Join(state, "hub-cli.token"),
		Policy:        polPath,
		StateDir:      state,
		Logs:          filepath.Join(state, "logs"),
		PIDs:          map[string]int{"lox": os.Getpid()},
		Version:       buildinfo.Read().String(),
	}
	loxLog, llog, err := openLoxLog(up.Logs)
	if err != nil {
		return err
	}
	defer loxLog.Close()
	s := &supervisor{o: o, up: up, state: state, log: llog, delay: o.RestartDelay, now: time.Now, kick: make(chan struct{}, 1)}
	if s.delay <= 0 {
		s.delay = DefaultRestartDelay
	}
	if o.Headless {
		s.out = out
	}
	up.Restarts = map[string]restarts.Tally{}
	if createCA {
		msg, err := exec.Command(bins["signer"], "init", "--dir", caDir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("creating the CA in %s: %v\n%s", caDir, err, msg)
		}
		fmt.Fprintf(out, "lox: created the lockhttp CA; agents trust %s\n", up.CACert)
	}
	// The bundle of an agent started by hand (lox env) is written anew at each start: the
	// system roots may have changed.
	if err := writeBundle(up.CABundle, up.CACert, out); err != nil {
		return err
	}
	if o.Secrets != "" {
		if up.Secrets, err = filepath.Abs(o.Secrets); err != nil {
			return err
		}
	}
	if ag != nil {
		if err := ag.prepare(up.CACert); err != nil {
			return err
		}
	}
	// The three processes, in the order they start. A restart starts the same command line,
	// with the addresses the first start resolved (a port the system picked stays the same).
	margs := map[string][]string{}
	for p := range metricsOffset {
		if margs[p], err = metricsArgs(o.MetricsListen, p); err != nil {
			return err
		}
	}
	signerArgs := func() []string {
		args := append([]string{"serve", "--ca", caDir, "--socket", up.SignerSocket, "--allow-uid", strconv.Itoa(os.Geteuid())}, margs["signer"]...)
		if os.Geteuid() == 0 {
			args = append(args, "--dev")
		}
		return args
	}
	signerLog := filepath.Join(up.Logs, "signer.log")
	signerProc := &proc{name: "signer", what: "the signer",
		start: func() (*child, error) { return start("signer", bins["signer"], signerLog, nil, signerArgs()...) },
		ready: func(ctx context.Context, c *child) error {
			return waitFor(ctx, c, readyTimeout, func() bool { return get(up.SignerSocket, "/health") == nil })
		},
		metrics: func() string { return signerMetrics(up.SignerSocket) }}
	hubListen := o.HubListen
	if hubListen == "" {
		hubListen = defaultHubListen
	}
	hubKey := filepath.Join(state, "hub-key.pem")
	hubGateToken := filepath.Join(state, "hub-gate.token")
	consoleArgs := func() []string {
		return append([]string{"-policy", polPath, "-state", filepath.Join(state, "console-state.json"), "-socket", up.ConsoleSocket, "-audit", up.ConsoleAudit, "-watch", "500ms",
			"-hub-listen", hubListen, "-hub-state", filepath.Join(state, "hub.json"), "-hub-key", hubKey,
			"-hub-gate-token", hubGateToken, "-hub-cli-token", up.HubCLIToken, "-phone-url", orAuto(o.PhoneURL),
			"-supervisor-uid", strconv.Itoa(os.Geteuid()), "-ca-cert", up.CACert}, slices.Concat(margs["console"], agentConsoleArgs(o.Agent))...)
	}
	consoleLog := filepath.Join(up.Logs, "console.log")
	var cst consoleapi.Status
	consoleProc := &proc{name: "console", what: "the console",
		ready: func(ctx context.Context, c *child) error {
			return waitFor(ctx, c, readyTimeout, func() bool {
				return getJSON(up.ConsoleSocket, "/status", &cst) == nil && cst.Hub != ""
			})
		},
		metrics: func() string { return cst.Metrics }}
	var tty *terminalState
	if o.Headless {
		consoleProc.start = func() (*child, error) {
			return start("console", bins["console"], consoleLog, out, consoleArgs()...)
		}
	} else {
		// The console's terminal UI owns this terminal: same process group (the foreground one),
		// this process's stdin and stdout. Its clean exit is the person quitting: the stack stops.
		tty = saveTerminal(os.Stdin)
		consoleProc.start = func() (*child, error) {
			return startInteractive("console", bins["console"], consoleLog, append(consoleArgs(), "-tui")...)
		}
		consoleProc.quit = func(c *child) bool { return c.err == nil }
	}
	gateListen := o.Listen
	var st gateapi.Status
	gateProc := &proc{name: "gate", what: "the gate",
		start: func() (*child, error) {
			gargs, err := gateArgs(o, gateListen, up, hubGateToken, hubKey)
			gargs = append(gargs, margs["gate"]...)
			if err != nil {
				return nil, err
			}
			return start("gate", bins["gate"], filepath.Join(up.Logs, "gate.log"), nil, gargs...)
		},
		// A restarted gate is up once it serves: until it has fetched the console's policy it
		// refuses every request (E_NO_CONSOLE, no-policy).
		ready: func(ctx context.Context, c *child) error {
			return waitFor(ctx, c, readyTimeout, func() bool {
				return getJSON(up.GateSocket, "/status", &st) == nil && st.Listen != ""
			})
		},
		metrics: func() string { return st.Metrics }}
	s.procs = []*proc{signerProc, consoleProc, gateProc}
	// A terminal UI's console that crashed (and did not come back) leaves the terminal in raw
	// mode on the alternate screen: lox gives it back before its own last lines.
	giveBack := func() {
		if c := consoleProc.cur; tty != nil && c != nil {
			select {
			case <-c.done:
				if c.err != nil {
					tty.restore(os.Stdout)
				}
				tty = nil
			default: // still running: it gives the terminal back itself when it stops
			}
		}
	}
	defer giveBack()
	stopAll := func() {
		s.stopAll()
		removeOwnUp(state)
	}
	// Said before the console starts: once its terminal UI owns the terminal, a line written
	// there would scroll the UI's screen under it.
	if os.Geteuid() == 0 {
		fmt.Fprintln(o.Stderr, "lox: running as root: the gate runs with -allow-root; in a deployment it runs as its own user")
	}
	if signerProc.cur, err = signerProc.start(); err != nil {
		return err
	}
	if err := signerProc.ready(ctx, signerProc.cur); err != nil {
		stopAll()
		return startError(signerProc.cur, "the signer", err, o)
	}
	if consoleProc.cur, err = consoleProc.start(); err != nil {
		stopAll()
		return err
	}
	if err := consoleProc.ready(ctx, consoleProc.cur); err != nil {
		stopAll()
		return startError(consoleProc.cur, "the console", err, o)
	}
	hubListen = cst.Hub
	up.Hub = "http://" + cst.Hub
	if ag != nil {
		// The gate listens on the enclosure's address: the link comes first.
		if err := ag.enclose(ctx, o.Enclosure, up.ConsoleSocket, up); err != nil {
			stopAll()
			return err
		}
	}
	if gateProc.cur, err = gateProc.start(); err != nil {
		stopAll()
		return err
	}
	// The first start waits until the gate decides with the console's policy.
	if err := waitFor(ctx, gateProc.cur, readyTimeout, func() bool {
		return getJSON(up.GateSocket, "/status", &st) == nil && st.PolicyVersion != ""
	}); err != nil {
		stopAll()
		return startError(gateProc.cur, "the gate", err, o)
	}
	gateListen = st.Listen
	// A restart's failure names the addresses as they are, not as given (127.0.0.1:0).
	s.o.Listen, s.o.HubListen = st.Listen, cst.Hub
	up.Listen = st.Listen
	up.Gate = "http://" + st.Listen
	for _, p := range s.procs {
		up.PIDs[p.name] = p.cur.pid
	}
	if o.MetricsListen != "" {
		up.Metrics = map[string]string{}
		for _, p := range s.procs {
			up.Metrics[p.name] = p.metrics()
			// A restart listens where the first start does: the port it took is kept.
			if a := keptMetricsArgs(o.MetricsListen, up.Metrics[p.name]); a != nil {
				margs[p.name] = a
			}
		}
	}
	up.Started = time.Now().UTC()
	if err := writeUp(state, up); err != nil {
		stopAll()
		return err
	}
	llog.Info("stack up", "gate", up.Gate, "hub", up.Hub, "pids", up.PIDs)
	if o.Headless {
		banner(out, up, st.PolicyVersion)
	}
	// The supervision ends with ctx, or when the agent's command exits.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	if ag != nil {
		proxyURL, err := ag.seal(st.Listen, up)
		if err != nil {
			stopAll()
			return err
		}
		fmt.Fprintf(out, "lox: starting %s as uid %d in %s, in a network namespace whose one way out is the gate at %s (link %s, the agent at %s), through %s\n",
			display.Line(strings.Join(o.Agent.Argv, " "), 120), o.Agent.UID, ag.dir, up.Enclosure.Gate, up.Enclosure.Link, up.Enclosure.Agent, proxyURL)
		if err := ag.start(proxyURL, o.Stdout, o.Stderr); err != nil {
			stopAll()
			return err
		}
		go func() {
			select {
			case <-ag.done:
				scancel()
			case <-sctx.Done():
			}
		}()
		up.PIDs["agent"] = int(ag.pid.Load())
		if err := writeUp(state, up); err != nil {
			fmt.Fprintln(o.Stderr, "lox:", err)
		}
	}
	var tailWG sync.WaitGroup
	tctx, tcancel := context.WithCancel(ctx)
	if o.Headless && o.Follow {
		tailWG.Add(1)
		go func() { defer tailWG.Done(); tailAudit(tctx, up.AuditDir, out) }()
	}
	// With an agent, lox's signals go to the command; only the caller's ctx ends here.
	runErr := s.run(sctx)
	scancel()
	if ag != nil {
		ag.terminate()
		ag.sweep()
	}
	tcancel()
	tailWG.Wait()
	stopAll()
	giveBack()
	llog.Info("stack stopped", "err", fmt.Sprint(runErr))
	fmt.Fprintln(out, "lox: stopped")
	if runErr != nil || ag == nil {
		return runErr
	}
	if code := ag.status(); code != 0 {
		return &ExitError{Code: code}
	}
	if ag.waitErr != nil && !errors.As(ag.waitErr, new(*exec.ExitError)) {
		return &ExitError{Code: 125, Err: fmt.Errorf("the agent's command: %w", ag.waitErr)}
	}
	return nil
}

// gateArgs are the gate's command line.
func gateArgs(o Options, listen string, up *Up, hubGateToken, hubKey string) ([]string, error) {
	args := []string{"-listen", listen, "-console", up.ConsoleSocket, "-audit", up.AuditDir, "-admin", up.GateSocket, "-signer", up.SignerSocket,
		"-hub", up.Hub, "-hub-token", hubGateToken, "-hub-key", hubKey + ".pub"}
	if o.Roots != "" {
		args = append(args, "-roots", o.Roots)
	}
	if o.Secrets != "" {
		abs, err := filepath.Abs(o.Secrets)
		if err != nil {
			return nil, err
		}
		args = append(args, "-secrets", abs)
	}
	if o.Upstream != "" {
		args = append(args, "-upstream", o.Upstream)
	}
	if o.UpstreamCredentialsFile != "" {
		abs, err := filepath.Abs(o.UpstreamCredentialsFile)
		if err != nil {
			return nil, err
		}
		args = append(args, "-upstream-credentials-file", abs)
	}
	if o.OTLPEndpoint != "" {
		args = append(args, "-otlp-endpoint", o.OTLPEndpoint)
	}
	if up.Enclosure != nil {
		args = append(args, "-transparent", up.Enclosure.Gate)
	}
	if os.Geteuid() == 0 {
		args = append(args, "-allow-root")
	}
	return args, nil
}

// ClaudeSecret is the name ClaudeKeyFile's key has in the secrets file, the one shipped
// default's [[inject]] rule for api.anthropic.com names.
const ClaudeSecret = "anthropic"

// ClaudePlaceholder is the ANTHROPIC_API_KEY an agent gets with ClaudeKeyFile: the SDKs refuse to
// start without a key, and no secret detector takes this one for a credential. The gate replaces
// it with the real key (docs/claude-code.md).
var ClaudePlaceholder = "sk-ant-" + strings.Repeat("x", 64)

// maxKeyFile bounds the read of ClaudeKeyFile.
const maxKeyFile = 64 << 10

// claudeKey puts ClaudeKeyFile's key in the gate's secrets file, pointing o.Secrets at it, and
// gives the agent the placeholder. A key file others can read is used, with a warning.
func claudeKey(o *Options, state string) error {
	f, err := os.Open(o.ClaudeKeyFile)
	if err != nil {
		return fmt.Errorf("--claude-key-file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(o.Stderr, "lox: warning: %s has mode %04o: others can read the Claude key; chmod 600 %s\n", o.ClaudeKeyFile, fi.Mode().Perm(), o.ClaudeKeyFile)
	}
	data, err := atomicfile.Read(f, o.ClaudeKeyFile, maxKeyFile)
	switch {
	case errors.Is(err, atomicfile.ErrTooLarge):
		return fmt.Errorf("--claude-key-file %s holds more than %d bytes: give a file with the key alone", o.ClaudeKeyFile, maxKeyFile)
	case err != nil:
		return fmt.Errorf("--claude-key-file: %w", err)
	}
	key := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	switch {
	case key == "":
		return fmt.Errorf("--claude-key-file %s is empty: put the Claude API key in it", o.ClaudeKeyFile)
	case strings.ContainsAny(key, "\r\n"):
		return fmt.Errorf("--claude-key-file %s holds more than one line: give the key alone", o.ClaudeKeyFile)
	}
	if o.Secrets == "" {
		o.Secrets = filepath.Join(state, "secrets.toml")
	}
	if err := gatefiles.Put(o.Secrets, ClaudeSecret, key); err != nil {
		return fmt.Errorf("--claude-key-file: %w", err)
	}
	if o.Agent != nil {
		o.Agent.Set = append(o.Agent.Set, "ANTHROPIC_API_KEY="+ClaudePlaceholder)
	}
	return nil
}

// writeUp writes up.json atomically, for its owner only.
func writeUp(state string, up *Up) error {
	data, _ := json.MarshalIndent(up, "", "  ")
	return atomicfile.WriteFile(filepath.Join(state, UpFile), append(data, '\n'), 0o600)
}

func policyFile(state, given string) (string, error) {
	path := given
	if path == "" {
		path = filepath.Join(state, "policy.toml")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			if err := atomicfile.WriteFile(path, shipped.Default, 0o600); err != nil {
				return "", err
			}
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return "", fmt.Errorf("policy: %w", err)
	}
	// On the first start the file becomes the approved policy: it must load. Later the console
	// serves the approved policy whatever the file says, and reports a bad file itself.
	if _, err := os.Stat(filepath.Join(state, "console-state.json")); errors.Is(err, os.ErrNotExist) {
		if _, err := policy.Load(abs, data); err != nil {
			return "", err
		}
	}
	return abs, nil
}

func findBinaries(dir string, names ...string) (map[string]string, error) {
	if dir == "" {
		if exe, err := os.Executable(); err == nil {
			dir = filepath.Dir(exe)
		}
	}
	out := make(map[string]string)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			out[n] = p
			continue
		}
		lp, err := exec.LookPath(n)
		if err != nil {
			return nil, fmt.Errorf("the %s binary is neither next to lox (%s) nor on PATH; build them all with: CGO_ENABLED=0 go build -o bin/ ./cmd/...", n, dir)
		}
		out[n] = lp
	}
	return out, nil
}

func start(name, bin, logPath string, stdout io.Writer, args ...string) (*child, error) {
	logf, from, err := openLog(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	if stdout != nil {
		cmd.Stdout = stdout
	} else {
		cmd.Stdout = logf
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, pid: cmd.Process.Pid, log: logPath, logFrom: from, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		c.exitedAt = time.Now()
		logf.Close()
		close(c.done)
	}()
	return c, nil
}

// startInteractive starts a child on this process's terminal (stdin and stdout), in this
// process's group, so that it can read the terminal.
func startInteractive(name, bin, logPath string, args ...string) (*child, error) {
	logf, from, err := openLog(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, pid: cmd.Process.Pid, log: logPath, logFrom: from, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		c.exitedAt = time.Now()
		logf.Close()
		close(c.done)
	}()
	return c, nil
}

// openLog opens a child's log for appending, and returns its size: where this run's lines start.
func openLog(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

func stop(c *child) {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// waitFor polls ready until it holds, the child exits, ctx ends or the timeout passes.
func waitFor(ctx context.Context, c *child, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited: %v", c.name, c.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", c.name, timeout)
		}
	}
}

func get(socket, path string) error {
	return getJSON(socket, path, nil)
}

func getJSON(socket, path string, v any) error {
	resp, err := unixsock.Client(socket, 2*time.Second).Get("http://unix" + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

func banner(w io.Writer, up *Up, version string) {
	fmt.Fprintf(w, `lockhttp is up.
  proxy:   %s   (HTTP_PROXY / HTTPS_PROXY for the agent)
  hub:     %s   (lox tickets / approve / deny)
  CA:      %s   (the agent trusts this; see docs/trust-ca.md)
  policy:  %s (%s)
  audit:   %s
  logs:    %s
  state:   %s
  build:   %s
Try: curl --cacert %s -x %s https://github.com/
A shell for an agent started by hand (not enclosed): eval "$(lox env --state %s)"
`, up.Gate, up.Hub, up.CACert, up.Policy, shortVersion(version), up.AuditDir, up.Logs, filepath.Join(up.StateDir, UpFile), up.Version, up.CACert, up.Gate, up.StateDir)
}

func shortVersion(v string) string {
	if len(v) > 19 {
		return v[:19]
	}
	return v
}

// tailAudit prints a line for every record the gate writes, until ctx ends. The lines of one
// look at the file go out in one write, not one write a record.
func tailAudit(ctx context.Context, dir string, out io.Writer) {
	w := bufio.NewWriter(out)
	var cur string
	var off int64
	var partial []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		name := filepath.Join(dir, time.Now().UTC().Format("2006-01-02")+".jsonl")
		if name != cur {
			cur, off, partial = name, 0, nil
		}
		f, err := os.Open(cur)
		if err != nil {
			continue
		}
		f.Seek(off, io.SeekStart)
		br := bufio.NewReader(io.LimitReader(f, 4<<20))
		for {
			line, err := br.ReadBytes('\n')
			off += int64(len(line))
			if err != nil {
				partial = append(partial, line...)
				break
			}
			line = append(partial, line...)
			partial = nil
			printRecord(w, line)
		}
		f.Close()
		w.Flush()
	}
}

func printRecord(w io.Writer, line []byte) {
	var r struct {
		Event     string    `json:"event"`
		Time      time.Time `json:"time"`
		Container string    `json:"container"`
		Method    string    `json:"method"`
		URL       string    `json:"url"`
		Verdict   string    `json:"verdict"`
		Code      string    `json:"code"`
		Rule      string    `json:"rule"`
		Status    int       `json:"status"`
	}
	if json.Unmarshal(line, &r) != nil || r.Event == audit.EventIntent {
		return // an intent is shown by its outcome's line, as lox log shows it
	}
	extra := r.Rule
	if r.Code != "" {
		extra = r.Code + " " + r.Rule
	}
	fmt.Fprintf(w, "%s %-5s %3s %s %s  [%s]\n", r.Time.Local().Format("15:04:05"), r.Verdict,
		strconv.Itoa(r.Status), r.Method, strings.TrimSpace(r.URL), extra)
}

// orAuto is the phone page's public URL: the one given, or "auto" (http:// and the address the
// hub listens on: reachable from this machine, or from the LAN when the hub listens there).
func orAuto(given string) string {
	if given != "" {
		return given
	}
	return "auto"
}
