// Command gate is lockhttp's forward proxy: every request of the agent containers goes through
// it and is decided against the policy the console serves.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/auditdb"
	"github.com/lockhttp/lockhttp/internal/buildinfo"
	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/consoleclient"
	"github.com/lockhttp/lockhttp/internal/dnsanswer"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signerclient"
	"github.com/lockhttp/lockhttp/internal/tracing"
	"github.com/lockhttp/lockhttp/internal/traffic"
	"github.com/lockhttp/lockhttp/internal/transport"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	maxConns, maxConnsPerSource int
	listen                      string
	console                     string
	auditDir                    string
	auditBudget                 string
	auditSummarize              int
	auditKey                    string
	auditDSNFile                string
	admin                       string
	upstream                    string
	upstreamCredentialsFile     string
	roots                       string
	signer                      string
	hubURL                      string
	hubToken                    string
	hubKey                      string
	secrets                     string
	poll                        time.Duration
	allowRoot                   bool
	adminUIDs                   unixsock.UIDs
	pprof                       bool
	metricsListen               string
	metricsSigner               bool
	otlpEndpoint                string
	transparent                 string
	cmdmain.Flags
	// Mutual TLS to a console and a hub on other machines (-console and -hub https://).
	tls         mtls.Flags
	tlsConsoles mtls.Allow
	tlsSigners  mtls.Allow
	instance    string
}

// The server identities admitted when no -tls-console or -tls-signer is given.
const (
	defaultTLSConsoles = "spiffe://lockhttp/console/*"
	defaultTLSSigners  = "spiffe://lockhttp/signer/*"
)

// isTLS reports whether a -console or -hub value is a URL of mutual TLS.
func isTLS(s string) bool { return strings.HasPrefix(s, "https://") }

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:3130", "proxy listen address (host:port)")
	fs.StringVar(&o.console, "console", "", "where the gate fetches its policy (required): the console's unix socket, or https://HOST:PORT, a console on another machine (its -tls-listen) reached over mutual TLS with -tls-cert, -tls-key and -tls-ca")
	fs.StringVar(&o.auditDir, "audit", "", "directory of the audit files (required)")
	fs.StringVar(&o.auditBudget, "audit-budget", "10GiB", "the most the audit directory may hold (a size such as 10GiB); past it the gate refuses traffic with E_NO_AUDIT until old files are archived; lockhttp doctor warns at 80%")
	fs.IntVar(&o.auditSummarize, "audit-summarize-after", 20, "how many answers of the gate's own (refusals) to one container in one second get an audit record each; the rest of that second are written as one summary that lists their ids")
	fs.StringVar(&o.auditKey, "audit-key", "", "the audit key (Ed25519, PEM, mode 0600) that signs the audit; created at first start when missing and the audit holds no signed log (default: AUDIT_DIR/audit.key; see lockhttp audit keygen)")
	fs.StringVar(&o.auditDSNFile, "audit-dsn-file", "", "a file holding the PostgreSQL DSN of the audit's database copy (or set LOCKHTTP_AUDIT_DSN); empty: no copy")
	fs.StringVar(&o.admin, "admin", "", "unix socket for GET /status (for lox and lockhttp doctor); empty: none")
	fs.Var(&o.adminUIDs, "admin-uid", "uid allowed on the admin socket (repeatable; default: the gate's own uid)")
	fs.StringVar(&o.upstream, "upstream", "", "upstream proxy, http://host:port (for example squid); empty: direct. Its credential comes from -upstream-credentials-file or "+egress.ProxyAuthEnv+", never the command line")
	fs.StringVar(&o.upstreamCredentialsFile, "upstream-credentials-file", "", "a file holding the upstream proxy's credential, user:password on one line (mode 0600; or set "+egress.ProxyAuthEnv+"); empty: the environment's, else none")
	fs.StringVar(&o.signer, "signer", "", "the signer's unix socket, or https://HOST:PORT (its --tls-listen) reached over mutual TLS with -tls-cert: decrypt CONNECTs to hosts not on the splice list; empty: decide every CONNECT at the domain")
	fs.StringVar(&o.hubURL, "hub", "", "the hub's URL for ASK tickets: http://HOST:PORT with -hub-token, or https://HOST:PORT (the console's -hub-tls-listen) over mutual TLS, the gate named by -tls-cert; empty: every ASK is refused with E_NO_CONSOLE")
	fs.StringVar(&o.hubToken, "hub-token", "", "the file holding the gate's token for the hub (an http:// -hub)")
	fs.StringVar(&o.hubKey, "hub-key", "", "the hub's public key file (PEM): every decision must be signed by it")
	fs.StringVar(&o.secrets, "secrets", "", "the gate's secrets file (TOML, mode 0600): the credentials [[inject]] rules add; empty: none")
	fs.StringVar(&o.roots, "roots", "", "PEM file of extra root certificates for origins, added to the system roots")
	fs.DurationVar(&o.poll, "poll", 2*time.Second, "how often to fetch the policy from the console")
	fs.IntVar(&o.maxConns, "max-conns", 4096, "the most client connections held at once (at it, a new one takes the place of the oldest)")
	fs.IntVar(&o.maxConnsPerSource, "max-conns-per-source", 256, "the most client connections from one source address (past it, the source's oldest is closed)")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics at /metrics on this TCP address (host:port); empty: none")
	fs.BoolVar(&o.metricsSigner, "metrics-signer", false, "also serve the signer's lockhttp_signer_* families on -metrics-listen, read over -signer's socket at each scrape: for a signer with no network of its own (the compose setup); a signer with its own -metrics-listen (lox run) needs none")
	fs.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "export a span of every finished request to this OTLP/HTTP collector URL (http://host:4318; /v1/traces is added to a URL with no path); empty: none")
	fs.StringVar(&o.transparent, "transparent", "", "an IPv4 address of this machine where the gate also serves clients that ignore the proxy: DNS on port 53 (every A query answered with this address), TLS and plain HTTP on 80, 443 and every port of the policy's allow_ports (decided by the TLS server name or the Host), and the proxy on -listen's port; empty: none")
	fs.BoolVar(&o.pprof, "debug-pprof", false, "serve Go's profiler at /debug/pprof/ on the admin socket")
	fs.BoolVar(&o.allowRoot, "allow-root", false, "run as root (local development only; deployments run the gate as uid 10003)")
	o.Flags.Define(fs, "the gate")
	o.tls.Register(fs)
	fs.Var(&o.tlsConsoles, "tls-console", "an identity the console and hub must prove over mutual TLS: spiffe://lockhttp/console/NAME or .../console/* (repeatable; default "+defaultTLSConsoles+")")
	fs.StringVar(&o.instance, "instance", "", "this gate's name among the gates of its identity (the replicas of a Deployment share a certificate): sent to the console with each fetch, and the instance of its audit's database copy; 1 to 64 letters, digits, '.', '_', '-', ':' (default: the host name)")
	fs.Var(&o.tlsSigners, "tls-signer", "an identity an https:// -signer must prove: spiffe://lockhttp/signer/NAME or .../signer/* (repeatable; default "+defaultTLSSigners+")")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.Version {
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; the gate takes flags only (see gate -h)", fs.Arg(0))
	}
	if o.console == "" {
		return nil, errors.New("-console is required: the gate never reads a policy file, it fetches the policy from the console's socket")
	}
	if o.auditDir == "" {
		return nil, errors.New("-audit is required: every request is audited")
	}
	if _, err := policy.ParseSize(o.auditBudget); err != nil {
		return nil, fmt.Errorf("-audit-budget %q: %w; write a size such as 10GiB", o.auditBudget, err)
	}
	if o.auditSummarize < 1 {
		return nil, fmt.Errorf("-audit-summarize-after %d: use 1 or more", o.auditSummarize)
	}
	if o.otlpEndpoint != "" {
		if _, err := tracing.ParseEndpoint(o.otlpEndpoint); err != nil {
			return nil, fmt.Errorf("-otlp-endpoint %w", err)
		}
	}
	if o.upstream != "" {
		if _, err := egress.ParseUpstream(o.upstream); err != nil {
			return nil, fmt.Errorf("-upstream %w", err)
		}
	} else if o.upstreamCredentialsFile != "" {
		return nil, errors.New("-upstream-credentials-file needs -upstream: the credential is the upstream proxy's")
	}
	if o.metricsSigner && (o.signer == "" || o.metricsListen == "") {
		return nil, errors.New("-metrics-signer needs -signer (the socket its families are read from) and -metrics-listen (where they are served)")
	}
	if o.transparent != "" {
		a, err := netip.ParseAddr(o.transparent)
		if err != nil || !a.Is4() || a.IsUnspecified() {
			return nil, fmt.Errorf("-transparent %q: give one IPv4 address of this machine (the address agents' DNS answers point to), such as 10.213.10.2", o.transparent)
		}
	}
	switch {
	case o.hubURL != "" && o.hubKey == "":
		return nil, errors.New("-hub needs -hub-key: the gate verifies every decision with the hub's public key")
	case o.hubURL != "" && !isTLS(o.hubURL) && o.hubToken == "":
		return nil, errors.New("-hub needs -hub-token (or an https:// -hub, over mutual TLS): the gate authenticates to the hub")
	case isTLS(o.hubURL) && o.hubToken != "":
		return nil, errors.New("-hub-token is for an http:// -hub: over mutual TLS the gate's certificate names it")
	}
	if isTLS(o.console) || isTLS(o.hubURL) || isTLS(o.signer) {
		if err := o.tls.Check(); err != nil {
			return nil, fmt.Errorf("an https:// -console, -hub or -signer: %w", err)
		}
	} else if o.tls.Given() {
		return nil, errors.New("-tls-cert, -tls-key, -tls-ca, -tls-crl and -tls-deny are for an https:// -console, -hub or -signer")
	}
	if o.tlsConsoles.Empty() {
		o.tlsConsoles = mtls.MustAllow(defaultTLSConsoles)
	}
	if o.instance == "" {
		h, _ := os.Hostname()
		o.instance = instanceName(h)
	} else if instanceName(o.instance) == "" {
		return nil, fmt.Errorf("-instance %q: use 1 to 64 letters, digits, '.', '_', '-' and ':'", o.instance)
	}
	if o.tlsSigners.Empty() {
		o.tlsSigners = mtls.MustAllow(defaultTLSSigners)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "health" {
		return runHealth(args[1:], stdout, stderr)
	}
	o, err := parse(args, stderr)
	if err != nil {
		return cmdmain.UsageExit("gate", err, stderr)
	}
	log, code, ok := o.Start("gate", stdout, stderr)
	if !ok {
		return code
	}
	if os.Geteuid() == 0 && !o.allowRoot {
		fmt.Fprintln(stderr, "gate: refusing to run as root; run it as its own user (uid 10003 in the compose setup), or pass -allow-root for local development")
		return 2
	}
	ctx, stop := cmdmain.Signals()
	defer stop()
	if err := serve(ctx, o, log); err != nil {
		fmt.Fprintln(stderr, "gate:", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, o *options, log *slog.Logger) error {
	var upstream *url.URL
	var upstreamAuth *egress.ProxyAuth
	credential := "none"
	if o.upstream != "" {
		var err error
		if upstream, err = egress.ParseUpstream(o.upstream); err != nil {
			return fmt.Errorf("-upstream %w", err)
		}
		if upstreamAuth, credential, err = upstreamCredential(o.upstreamCredentialsFile); err != nil {
			return err
		}
	}
	roots, fromBundle := systemRoots()
	if fromBundle {
		log.Info("the system has no root certificates: origins are verified against the roots built into the gate")
	}
	if o.roots != "" {
		pem, err := os.ReadFile(o.roots)
		if err != nil {
			return fmt.Errorf("-roots: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-roots %s: no PEM certificates in it", o.roots)
		}
	}
	reg, ml, err := listenMetrics(o.metricsListen)
	if err != nil {
		return err
	}
	var ident *mtls.Source // the gate's identity for mutual TLS, nil without one
	if o.tls.Given() {
		if ident, err = o.tls.Load(log); err != nil {
			return fmt.Errorf("mutual TLS: %w", err)
		}
		log.Info("mutual TLS identity", "id", ident.ID().String(), "consoles", o.tlsConsoles.String())
	}
	var aw *audit.Writer
	am := metrics.NewAudit(reg, func() int { return aw.Queued() })
	budget, _ := policy.ParseSize(o.auditBudget) // checked by parse
	key := o.auditKey
	if key == "" {
		key = filepath.Join(o.auditDir, audit.KeyFileName)
	}
	dsn := os.Getenv("LOCKHTTP_AUDIT_DSN")
	if o.auditDSNFile != "" {
		data, err := os.ReadFile(o.auditDSNFile)
		if err != nil {
			return fmt.Errorf("-audit-dsn-file: %w", err)
		}
		dsn = strings.TrimSpace(string(data))
	}
	var sink *auditdb.Sink
	ao := audit.Options{Dir: o.auditDir, Logger: log, Budget: budget, SummarizeAfter: o.auditSummarize, KeyFile: key, CreateKey: true, Metrics: am}
	if dsn != "" {
		gateID := "" // the rows' gate: this gate's identity in a fleet's database
		if ident != nil {
			gateID = ident.ID().String()
		}
		sink = auditdb.New(auditdb.Options{Dir: o.auditDir, DSN: dsn, Gate: gateID, Instance: o.instance, Logger: log,
			Metrics: metrics.NewAuditDB(reg, func() metrics.AuditDBLag { return sink.Lag() })})
		ao.Sink = sink
	}
	aw, err = audit.Open(ao)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer aw.Close()
	if sink != nil {
		go sink.Run(ctx)
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	own, err := ownAddrs(l.Addr())
	if err != nil {
		return err
	}
	var tr *transparentSetup
	if o.transparent != "" {
		if tr, err = listenTransparent(netip.MustParseAddr(o.transparent), l); err != nil {
			l.Close()
			return err
		}
		defer tr.close()
		// The gate never dials its transparent address, on any port.
		own = append(own, netip.AddrPortFrom(tr.addr, 0))
	}
	dialer := &egress.Dialer{Upstream: upstream, UpstreamAuth: upstreamAuth, Own: own}
	var g *gate.Gate
	gm := metrics.NewGate(reg, metrics.GateState{
		Tunnels:     func() int { return g.MetricsState().Tunnels() },
		Connections: func() int { return g.MetricsState().Connections() },
		HeldBytes:   func() int64 { return g.MetricsState().HeldBytes() },
	})
	cfg := gate.Config{Logger: log, Audit: aw, Dialer: dialer, RootCAs: roots, SecretsFile: o.secrets,
		MaxConns: o.maxConns, MaxConnsPerSource: o.maxConnsPerSource, Metrics: gm, HeldDir: filepath.Join(o.auditDir, heldDir)}
	var traces *tracing.Exporter
	if o.otlpEndpoint != "" {
		tr, err := tracing.New(tracing.Options{Endpoint: o.otlpEndpoint, Version: buildinfo.Read().String(),
			Logger: log, Metrics: metrics.NewTracing(reg)})
		if err != nil {
			return fmt.Errorf("-otlp-endpoint: %w", err)
		}
		tctx, stopTraces := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { tr.Run(tctx); close(done) }()
		defer func() { stopTraces(); <-done }() // the spans still queued go out as the gate stops
		cfg.Tracer, traces = tr, tr
		log.Info("traces exporting", "endpoint", tr.Endpoint())
	}
	if o.signer != "" {
		var sc *signerclient.Client
		scm := metrics.NewSignerClient(reg, func() int { return sc.Len() })
		so := signerclient.Options{Socket: o.signer, Logger: log, Metrics: scm}
		if isTLS(o.signer) {
			so.TLS = ident.ClientConfig(o.tlsSigners)
		}
		sc, err = signerclient.New(so)
		if err != nil {
			return fmt.Errorf("signer client: %w", err)
		}
		cfg.Certs = sc
		if o.metricsSigner {
			metrics.ImportSigner(reg, metrics.SignerImportOptions{Read: sc.Metrics, Logger: log})
		}
	}
	var hc *hubclient.Client
	if o.hubURL != "" {
		key := func() (ed25519.PublicKey, error) { return hubclient.ReadPublicKey(o.hubKey) }
		if isTLS(o.hubURL) {
			if hc, err = hubclient.NewTLS(o.hubURL, ident.ClientConfig(o.tlsConsoles), key, log); err != nil {
				return err
			}
		} else {
			tok, err := hubclient.ReadToken(o.hubToken)
			if err != nil {
				return err
			}
			hc = hubclient.NewWithKey(o.hubURL, tok, key, log)
		}
		cfg.Hub = hc
		q := traffic.NewQueue() // every decision, for the terminal
		cfg.Audit = feedAuditor{Writer: aw, q: q}
		go q.Run(ctx, hc.SendTraffic)
	}
	refreshNow, refresh := consoleclient.Refresher()
	cfg.Refresh = refresh
	g = gate.New(cfg)
	// What a killed gate held for a human gets its record now, and the hub hears of it with the
	// first report of what this gate holds.
	cut, err := g.RecordCut(ctx)
	if err != nil {
		log.Error("gate: the held requests a killed gate cut could not all be recorded; the next start tries again", "err", err)
	}
	if hc != nil {
		hc.ReportCut(cut)
		go hc.Run(ctx)
	}
	go g.WatchFiles(ctx, 5*time.Second)
	metricsURL := ""
	if ml != nil {
		metricsURL = metrics.URL(ml.Addr())
		go reg.Serve(ctx, ml)
		log.Info("metrics serving", "url", metricsURL)
	}
	applied := make(chan struct{}, 1) // a new policy: tell the hub at once
	if hc != nil {
		go reportState(ctx, g, hc, cfg, l.Addr().String(), 5*time.Second, applied)
	}

	var consoleErr atomic.Pointer[string]
	var consoleChecked atomic.Int64
	setPolicy := func(p *policy.Policy) {
		g.SetPolicy(p)
		gm.PolicyApplied(p.Version, time.Now())
		kick(applied)
	}
	cc := consoleclient.New(o.console)
	if isTLS(o.console) {
		if cc, err = consoleclient.NewTLS(o.console, ident.ClientConfig(o.tlsConsoles), o.instance); err != nil {
			return err
		}
	}
	go consoleclient.Poll(ctx, cc, o.poll, log, setPolicy, func(err error) {
		consoleChecked.Store(time.Now().UnixNano())
		if err != nil {
			gm.PolicyFetchFailed()
		}
		if err == nil {
			consoleErr.Store(nil)
			return
		}
		s := err.Error()
		if ident != nil {
			// What the console's refusal cannot say: this gate's own certificate's state.
			if st := ident.Status(); len(st.Errors) > 0 {
				s += " (this gate's identity: " + strings.Join(st.Errors, "; ") + ")"
			}
		}
		consoleErr.Store(&s)
	}, refreshNow)
	if o.admin != "" {
		al, err := unixsock.Listen(o.admin, 0o660)
		if err != nil {
			return err
		}
		uids := []int(o.adminUIDs)
		if len(uids) == 0 {
			uids = []int{os.Geteuid()}
		}
		info := gate.StatusInfo{Listen: l.Addr().String(), Started: time.Now(), ConsoleError: &consoleErr, ConsoleChecked: &consoleChecked, Metrics: metricsURL}
		if tr != nil {
			info.Transparent = tr.addr.String()
		}
		if sink != nil {
			info.AuditSink = sink
		}
		if traces != nil {
			info.Traces = traces
		}
		var h http.Handler = g.StatusHandler(info)
		if o.pprof {
			mux := http.NewServeMux()
			mux.Handle("/status", h)
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			h = mux
		}
		write := 10 * time.Second
		if o.pprof {
			write = 2 * time.Minute // a CPU profile takes 30 s by default
		}
		cl := connlimit.ForUIDs(al, uids, log, "gate-admin")
		srv := cl.Server(&http.Server{Handler: unixsock.RequireUID(uids, h, nil), ConnContext: unixsock.ConnContext,
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: write,
			IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10})
		go srv.Serve(cl)
		defer srv.Close()
	}
	log.Info("gate listening", "listen", l.Addr().String(), "console", o.console, "upstream", o.upstream, "upstream_credential", credential)
	go g.ReturnMemoryWhenQuiet(ctx)
	proxy := l
	if tr != nil {
		sctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		ctx = sctx
		tr.serve(ctx, g, log, cancel)
		if tr.proxy != nil {
			proxy = transport.Merge(l, tr.proxy)
		}
	}
	err = g.Serve(ctx, proxy)
	if c := context.Cause(ctx); err == nil && c != nil && !errors.Is(c, context.Canceled) {
		err = c
	}
	return err
}

// transparentSetup is the gate's listeners on its -transparent address: DNS (UDP and TCP 53)
// and the proxy's port; the transparent ports themselves follow the policy (ServeTransparent).
type transparentSetup struct {
	addr       netip.Addr
	proxyPort  int
	proxy      net.Listener // nil when -listen already covers addr
	dnsUDP     net.PacketConn
	dnsTCP     net.Listener
	tcpListens func(port int) (net.Listener, error)
}

// listenTransparent listens on addr for DNS and, unless the proxy's listener l covers it
// already, for the proxy on l's port.
func listenTransparent(addr netip.Addr, l net.Listener) (*transparentSetup, error) {
	lap, err := netip.ParseAddrPort(l.Addr().String())
	if err != nil {
		return nil, err
	}
	t := &transparentSetup{addr: addr, proxyPort: int(lap.Port())}
	t.tcpListens = func(port int) (net.Listener, error) {
		l, err := net.Listen("tcp4", netip.AddrPortFrom(addr, uint16(port)).String())
		return l, transparentListenError(err)
	}
	if a := lap.Addr().Unmap(); !a.IsUnspecified() && a != addr {
		if t.proxy, err = t.tcpListens(t.proxyPort); err != nil {
			return nil, fmt.Errorf("-transparent: the proxy on %s: %w", addr, err)
		}
	}
	dns := netip.AddrPortFrom(addr, 53).String()
	if t.dnsUDP, err = net.ListenPacket("udp4", dns); err == nil {
		t.dnsTCP, err = t.tcpListens(53)
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("-transparent: DNS on %s: %w", dns, transparentListenError(err))
	}
	return t, nil
}

// transparentListenError names the fix of a listen that failed on the transparent address.
func transparentListenError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w; fix: ports under 1024 need net.ipv4.ip_unprivileged_port_start=0 (docker sets it in every container) or CAP_NET_BIND_SERVICE", err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%w; fix: -transparent must be an address of this machine (of the agents' network)", err)
	}
	return err
}

func (t *transparentSetup) close() {
	if t.proxy != nil {
		t.proxy.Close()
	}
	if t.dnsTCP != nil {
		t.dnsTCP.Close()
	}
	if t.dnsUDP != nil {
		t.dnsUDP.Close()
	}
}

// serve answers DNS and serves the transparent ports until ctx ends; a transparent listener that
// cannot start ends the gate (cancel).
func (t *transparentSetup) serve(ctx context.Context, g *gate.Gate, log *slog.Logger, cancel context.CancelCauseFunc) {
	ds := dnsanswer.New(g.DNSConfig(t.addr))
	go ds.ServeUDP(ctx, t.dnsUDP)
	go ds.ServeTCP(ctx, t.dnsTCP)
	go func() {
		if err := g.ServeTransparent(ctx, gate.TransparentListen{Addr: t.addr, Skip: []int{53, t.proxyPort}, Listen: t.tcpListens}); err != nil {
			cancel(err)
		}
	}()
	log.Info("gate transparent", "addr", t.addr.String(), "dns", 53, "proxy", t.proxyPort)
}

// maxCredentialFile bounds the read of -upstream-credentials-file.
const maxCredentialFile = 4 << 10

// upstreamCredential is the upstream proxy's credential: from file when one is given, else from
// the environment (egress.ProxyAuthEnv), else none; from says which ("file", "environment",
// "none"). Errors name the file, never its content.
func upstreamCredential(file string) (auth *egress.ProxyAuth, from string, err error) {
	raw, from := os.Getenv(egress.ProxyAuthEnv), "environment"
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, "", fmt.Errorf("-upstream-credentials-file: %w", err)
		}
		defer f.Close()
		data, err := atomicfile.Read(f, file, maxCredentialFile)
		switch {
		case errors.Is(err, atomicfile.ErrTooLarge):
			return nil, "", fmt.Errorf("-upstream-credentials-file %s holds more than %d bytes: give a file with user:password alone", file, maxCredentialFile)
		case err != nil:
			return nil, "", fmt.Errorf("-upstream-credentials-file %s: %w", file, err)
		}
		raw, from = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r"), "file"
	}
	if raw == "" {
		if file != "" {
			return nil, "", fmt.Errorf("-upstream-credentials-file %s is empty: put user:password in it", file)
		}
		return nil, "none", nil
	}
	if auth, err = egress.ParseProxyAuth(raw); err != nil {
		if file != "" {
			return nil, "", fmt.Errorf("-upstream-credentials-file %s: %w", file, err)
		}
		return nil, "", fmt.Errorf("%s: %w", egress.ProxyAuthEnv, err)
	}
	return auth, from, nil
}

// heldDir is the journal of held requests, in the audit directory (gate.Config.HeldDir).
const heldDir = "held"

// ownAddrs lists the addresses the gate listens on: the listen address, or every interface
// address when it listens on all of them. The floor never dials them.
func ownAddrs(a net.Addr) ([]netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return nil, fmt.Errorf("listen address %s: %w", a, err)
	}
	if !ap.Addr().IsUnspecified() {
		return []netip.AddrPort{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, nil
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing interface addresses: %w", err)
	}
	var out []netip.AddrPort
	for _, ia := range ifs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, netip.AddrPortFrom(p.Addr().Unmap(), ap.Port()))
		}
	}
	return out, nil
}

var _ = policy.Hash

// reportState tells the hub the gate's state, for the facades' at-a-glance line: every interval,
// and at once when applied is signalled (a policy applied), so that the terminal's header names
// the policy the gate decides with as soon as it does.
func reportState(ctx context.Context, g *gate.Gate, hc *hubclient.Client, cfg gate.Config, listen string, every time.Duration, applied <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		st := hubapi.GateState{Listen: listen, Signer: "off", Audit: "ok"}
		if p := g.Policy(); p != nil {
			st.PolicyVersion = p.Version
		}
		st.Budgets = g.BudgetState()
		if err := cfg.Audit.Healthy(); err != nil {
			st.Audit = err.Error()
		}
		if cfg.Certs != nil {
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st.Signer = "ok"
			if err := cfg.Certs.Health(hctx); err != nil {
				st.Signer = err.Error()
			}
			cancel()
		}
		hc.ReportState(ctx, st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-applied:
		}
	}
}

// listenMetrics listens on addr for the metrics and returns the gate's registry; with no addr
// it returns a registry nobody scrapes (the counts cost the same) and no listener.
func listenMetrics(addr string) (*metrics.Registry, net.Listener, error) {
	reg := metrics.NewRegistry("gate", buildinfo.Read().String())
	if addr == "" {
		return reg, nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("-metrics-listen %s: %w", addr, err)
	}
	return reg, l, nil
}

// instanceName is s when it is a gate's instance name (1 to 64 letters, digits, '.', '_', '-'
// and ':'), else "".
func instanceName(s string) string {
	if s == "" || len(s) > 64 {
		return ""
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return ""
		}
	}
	return s
}
