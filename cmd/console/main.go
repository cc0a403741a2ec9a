// Command console owns the lockhttp policy: it checks the policy file, follows its edits and
// serves the approved policy to the gate over a unix socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/buildinfo"
	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	policy   string
	state    string
	socket   string
	auditDir string
	gateUIDs unixsock.UIDs
	// supervisorUIDs may report restarts of the stack's processes (lox run's uid).
	supervisorUIDs unixsock.UIDs
	watch          time.Duration

	hubListen    string
	hubStore     string
	hubDSNFile   string
	hubState     string
	hubKey       string
	hubGateToken string
	hubCLIToken  string
	hubTTL       time.Duration
	phoneURL     string
	caCert       string
	tui          bool

	metricsListen string
	// gateAudit is the gate's audit directory, which :propose learns from.
	gateAudit string
	// agentUIDs are the uids agents run as on this machine (lox run -- COMMAND's).
	agentUIDs unixsock.UIDs
	cmdmain.Flags

	// A fleet's gates and facades over mutual TLS.
	tlsListen    string
	hubTLSListen string
	tls          mtls.Flags
	tlsGates     mtls.Allow
	tlsFacades   mtls.Allow
}

// The identities admitted over mutual TLS when no -tls-gate or -tls-facade is given.
const (
	defaultTLSGates   = "spiffe://lockhttp/gate/*"
	defaultTLSFacades = "spiffe://lockhttp/facade/*"
)

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.policy, "policy", "", "the policy file (required)")
	fs.StringVar(&o.state, "state", "", "the console's state file: the approved policy and the review decisions (strongly advised: without it every start approves the file as it is)")
	fs.StringVar(&o.socket, "socket", "", "unix socket to serve the policy on (required)")
	fs.StringVar(&o.auditDir, "audit", "", "directory of the console's audit files (required)")
	fs.Var(&o.gateUIDs, "gate-uid", "uid allowed to fetch the policy (repeatable; default: the console's own uid)")
	fs.Var(&o.supervisorUIDs, "supervisor-uid", "uid allowed to report restarts of the stack's processes (lox run passes its own; repeatable): each is written to the console's audit and shown on its terminal; default: none, no restart reports")
	fs.Var(&o.agentUIDs, "agent-uid", "the uid an agent runs as on this machine (lox run -- COMMAND passes its agent's; repeatable): a policy whose [[notify]] channel has insecure_loopback is refused, since the agent could bind its port and approve its own requests; default: none")
	fs.DurationVar(&o.watch, "watch", time.Second, "how often to check the policy file for edits")
	fs.StringVar(&o.hubListen, "hub-listen", "", "host the hub on this TCP address (the gate's and the facades' API); empty: no hub, every ASK is refused with E_NO_CONSOLE")
	fs.StringVar(&o.hubStore, "hub-store", "file", "where the hub keeps its tickets and decisions: \"file\" (-hub-state, this process alone) or \"postgres\" (the database of -hub-dsn-file or "+hubDSNEnv+", shared by every console/hub replica)")
	fs.StringVar(&o.hubDSNFile, "hub-dsn-file", "", "with -hub-store postgres: a file holding the PostgreSQL DSN of the hub's database (or set "+hubDSNEnv+"); never a DSN on the command line")
	fs.StringVar(&o.hubState, "hub-state", "", "the hub's state file (tickets and decisions across restarts; required with -hub-listen and -hub-store file)")
	fs.StringVar(&o.hubKey, "hub-key", "", "the hub's Ed25519 key file, created if missing with its public half next to it as FILE.pub for the gate (required with -hub-listen)")
	fs.StringVar(&o.hubGateToken, "hub-gate-token", "", "the gate's token file for the hub, created if missing (required with -hub-listen)")
	fs.StringVar(&o.hubCLIToken, "hub-cli-token", "", "the token file of lox's commands (tickets, approve, deny), created if missing; empty: no CLI facade")
	fs.DurationVar(&o.hubTTL, "ticket-ttl", hub.DefaultTicketTTL, "how long a ticket waits for a human before it expires")
	fs.StringVar(&o.phoneURL, "phone-url", "", "serve the phone page at /phone on the hub's address; the URL a phone reaches the hub at (http(s)://host[:port]), or \"auto\" for http:// and the address the hub listens on; empty: no phone page")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics at /metrics on this TCP address (host:port); empty: none")
	fs.StringVar(&o.caCert, "ca-cert", "", "the CA certificate `FILE` agents trust (lox run's ca.pem), named in the terminal UI's header beside the proxy's address; empty: not named")
	fs.StringVar(&o.gateAudit, "gate-audit", "", "the gate's audit directory, which :propose in the terminal learns from (read only); default: the one lox run's up.json beside -state names")
	fs.BoolVar(&o.tui, "tui", false, "run the terminal UI on this process's terminal (tickets, decisions; q quits the console)")
	o.Flags.Define(fs, "the console")
	fs.StringVar(&o.tlsListen, "tls-listen", "", "serve the policy to a fleet's gates on this TCP address (host:port) over mutual TLS (-tls-cert, -tls-key, -tls-ca): each gate proves its identity (-tls-gate), and GET /status names the policy version each fetched; empty: the unix socket only")
	fs.StringVar(&o.hubTLSListen, "hub-tls-listen", "", "serve the hub's API to a fleet's gates (-tls-gate) and facades (-tls-facade, lox with its certificate) on this TCP address over mutual TLS; the phone page and notification links stay on -hub-listen; empty: none")
	o.tls.Register(fs)
	fs.Var(&o.tlsGates, "tls-gate", "an identity admitted as a gate over mutual TLS: spiffe://lockhttp/gate/NAME, or spiffe://lockhttp/gate/* for every gate of the fleet (repeatable; default "+defaultTLSGates+")")
	fs.Var(&o.tlsFacades, "tls-facade", "an identity admitted as a facade over mutual TLS (tickets, approve, deny; GET /status of -tls-listen): spiffe://lockhttp/facade/NAME or .../facade/* (repeatable; default "+defaultTLSFacades+")")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.Version {
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; the console takes flags only (see console -h)", fs.Arg(0))
	}
	switch {
	case o.policy == "":
		return nil, errors.New("-policy is required")
	case o.socket == "" && o.tlsListen == "":
		return nil, errors.New("-socket is required (or -tls-listen, for a console whose gates are all on other machines)")
	case o.auditDir == "":
		return nil, errors.New("-audit is required")
	}
	if len(o.gateUIDs) == 0 {
		o.gateUIDs = unixsock.UIDs{os.Geteuid()}
	}
	switch o.hubStore {
	case "file":
		if o.hubListen != "" && o.hubState == "" {
			return nil, errors.New("-hub-listen needs -hub-state (or -hub-store postgres)")
		}
	case "postgres":
		if o.hubListen == "" {
			return nil, errors.New("-hub-store postgres needs -hub-listen: it is where the hub keeps its tickets")
		}
		if o.hubState != "" {
			return nil, errors.New("-hub-state is the file store's; with -hub-store postgres the database holds the tickets: drop -hub-state")
		}
	default:
		return nil, fmt.Errorf("-hub-store %q: use file or postgres", o.hubStore)
	}
	if o.hubListen != "" && (o.hubKey == "" || o.hubGateToken == "") {
		return nil, errors.New("-hub-listen needs -hub-key and -hub-gate-token")
	}
	if o.hubTLSListen != "" && o.hubListen == "" {
		return nil, errors.New("-hub-tls-listen needs -hub-listen: the hub it serves (its phone page and notification links stay there)")
	}
	if o.tlsListen != "" || o.hubTLSListen != "" {
		if err := o.tls.Check(); err != nil {
			return nil, fmt.Errorf("-tls-listen and -hub-tls-listen: %w", err)
		}
	} else if o.tls.Given() {
		return nil, errors.New("-tls-cert, -tls-key, -tls-ca, -tls-crl and -tls-deny serve -tls-listen or -hub-tls-listen: give one")
	}
	if o.tlsGates.Empty() {
		o.tlsGates = mtls.MustAllow(defaultTLSGates)
	}
	if o.tlsFacades.Empty() {
		o.tlsFacades = mtls.MustAllow(defaultTLSFacades)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "health" {
		return runHealth(args[1:], stdout, stderr)
	}
	o, err := parse(args, stderr)
	if err != nil {
		return cmdmain.UsageExit("console", err, stderr)
	}
	log, code, ok := o.Start("console", stdout, stderr)
	if !ok {
		return code
	}
	reg := metrics.NewRegistry("console", buildinfo.Read().String())
	var ml net.Listener
	if o.metricsListen != "" {
		if ml, err = net.Listen("tcp", o.metricsListen); err != nil {
			fmt.Fprintf(stderr, "console: -metrics-listen %s: %v\n", o.metricsListen, err)
			return 1
		}
	}
	var aw *audit.Writer
	am := metrics.NewAudit(reg, func() int { return aw.Queued() })
	aw, err = audit.Open(audit.Options{Dir: o.auditDir, Logger: log, Metrics: am})
	if err != nil {
		fmt.Fprintln(stderr, "console: audit:", err)
		return 1
	}
	defer aw.Close()
	out := stdout
	var msgs *messages
	if o.tui {
		msgs = &messages{} // the terminal belongs to the UI: the console's lines go to its status area
		out = msgs
	}
	cm := metrics.NewConsole(reg)
	// The hub's store first: with PostgreSQL it keeps the credential bindings the console serves
	// too, so that every replica serves the same.
	var store hub.Store
	var bindings console.BindingStore
	if o.hubListen != "" {
		if store, err = openHubStore(context.Background(), o, log); err != nil {
			fmt.Fprintln(stderr, "console: hub:", err)
			return 1
		}
		defer store.Close()
		if bs, ok := store.(console.BindingStore); ok {
			bindings = bs
		}
	}
	c, err := console.New(console.Config{PolicyPath: o.policy, StatePath: o.state, GateUIDs: o.gateUIDs, Logger: log, Audit: aw, Out: out, Metrics: cm, AgentUIDs: o.agentUIDs,
		Bindings: bindings})
	if err != nil {
		fmt.Fprintln(stderr, "console:", err)
		return 2
	}
	cm.SetReview(c.ReviewWaiting)
	var l net.Listener = newNoListener()
	if o.socket != "" {
		if l, err = unixsock.Listen(o.socket, 0o666); err != nil {
			fmt.Fprintln(stderr, "console:", err)
			return 1
		}
	}
	ctx, stop := cmdmain.Signals()
	defer stop()
	var fl *fleet
	if o.tlsListen != "" || o.hubTLSListen != "" {
		if fl, err = newFleet(ctx, o, log, aw); err != nil {
			fmt.Fprintln(stderr, "console:", err)
			return 1
		}
		if o.tlsListen != "" {
			if err := fl.servePolicy(ctx, o.tlsListen, c); err != nil {
				fmt.Fprintln(stderr, "console: -tls-listen:", err)
				return 1
			}
		}
	}
	go c.Watch(ctx, o.watch)
	rlog := &restarts.Log{} // lox's restarts of the stack's processes, for the terminal
	if ml != nil {
		c.SetMetrics(metrics.URL(ml.Addr()))
		go reg.Serve(ctx, ml)
	}
	var hs *hubServer
	if o.hubListen != "" {
		hs, err = serveHub(ctx, o, store, log, aw, c, reg, fl)
		if err != nil {
			fmt.Fprintln(stderr, "console: hub:", err)
			return 1
		}
		c.SetHub(hs.addr)
		c.SetPhone(hs.public)
	}
	if fl != nil {
		c.SetTLS(fl.policyAddr, fl.hubAddr)
	}
	// The policy socket is mode 0666 (the handler answers 403 to all but the gate's uids, and on
	// restarts.Path to all but the supervisor's).
	var h http.Handler = c.Handler()
	if len(o.supervisorUIDs) > 0 {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.Handle(restarts.Path, unixsock.RequireUID(o.supervisorUIDs, restarts.Handler(rlog, aw, log), func(r *http.Request, p unixsock.Peer, err error) {
			log.Warn("console: restart report refused", "uid", p.UID, "pid", p.PID)
		}))
		h = mux
	}
	pl := connlimit.ForUIDs(l, append(slices.Clone(o.gateUIDs), o.supervisorUIDs...), log, "console")
	srv := pl.Server(&http.Server{Handler: h, ConnContext: unixsock.ConnContext,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10})
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	log.Info("console serving", "socket", o.socket, "policy", o.policy, "gate_uids", []int(o.gateUIDs))
	if o.tui {
		if hs == nil {
			fmt.Fprintln(stderr, "console: -tui needs the hub (-hub-listen): the terminal shows its tickets")
			return 2
		}
		go srv.Serve(pl)
		pr := &proposer{c: c, hub: hs.hub, policyPath: o.policy, gateAudit: o.gateAudit, consoleAudit: o.auditDir, statePath: o.state, now: time.Now}
		err := runTUI(ctx, hs, c, msgs, rlog, o.caCert, pr)
		stop()
		if err != nil {
			fmt.Fprintln(stderr, "console: terminal:", err)
			return 1
		}
		return 0
	}
	if err := srv.Serve(pl); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "console:", err)
		return 1
	}
	return 0
}
