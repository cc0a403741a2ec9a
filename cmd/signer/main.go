// Command signer holds the lockhttp CA key: `signer init` creates the CA, `signer serve` signs
// short-lived leaf certificates for the gate over a unix socket.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/buildinfo"
	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

const usage = `usage:
  signer init --dir DIR [--root]
      Create the CA in DIR (made 0700 if missing): ca-key.pem (mode 0600) and ca.pem (0644).
      ca.pem is the one file agents trust. It never replaces an existing CA. --root makes a
      fleet's root, which signs node signers' intermediates.
  signer serve --ca DIR --socket PATH --allow-uid UID [--allow-uid UID]... [flags]
      Serve leaf certificates to the gate (the allowed uids) over a unix socket.
  signer serve --root --ca DIR --tls-listen ADDR --tls-node IDENTITY... [flags]
      A fleet's root signer: hold the root key and sign only the intermediates of the node
      signers --tls-node lists, over mutual TLS.
  signer serve --root-url https://HOST:PORT --root-ca FILE --socket PATH --allow-uid UID [flags]
      A node signer: sign leaves with a short-lived intermediate from the root signer, renewed
      at two thirds of its life; it holds no CA key on disk.
  signer --ca DIR --socket PATH --allow-uid UID ...
      The same as serve.
  signer --version
      Print the signer's version (module version, revision, build) and exit.
  signer ca-cert --ca DIR
      Print the CA's certificate, ca.pem, the file agents trust (kubectl exec into an image that
      holds nothing but the signer).
  signer health --socket PATH
      Exit 0 when a signer listens on PATH (a container's healthcheck): it connects and closes,
      and asks for nothing. The signer closes such a connection from its own uid without a log
      line.

Run "signer init -h" or "signer serve -h" for the flags of each.
`

func main() {
	ctx, stop := cmdmain.Signals()
	code := run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, euid: os.Geteuid(), now: time.Now})
	stop()
	os.Exit(code)
}

// env is what run takes from the process, so that tests can choose it.
type env struct {
	stdout, stderr io.Writer
	euid           int
	now            func() time.Time
}

// run runs the signer with args (without the program name) until ctx ends. It returns the exit
// code: 0 done, 1 failed, 2 bad usage.
func run(ctx context.Context, args []string, e env) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(e.stderr, usage)
		return 2
	case args[0] == "init":
		return runInit(args[1:], e)
	case args[0] == "serve":
		return runServe(ctx, args[1:], e)
	case args[0] == "--version" || args[0] == "-version" || args[0] == "version":
		cmdmain.PrintVersion(e.stdout, "signer")
		return 0
	case args[0] == "health":
		return runHealth(args[1:], e)
	case args[0] == "ca-cert":
		return runCACert(args[1:], e)
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "--h" || args[0] == "help":
		fmt.Fprint(e.stdout, usage)
		return 0
	case len(args[0]) > 0 && args[0][0] == '-':
		return runServe(ctx, args, e)
	default:
		fmt.Fprintf(e.stderr, "signer: unknown command %q; use init or serve\n\n%s", args[0], usage)
		return 2
	}
}

// parseFlags parses args with fs and refuses positional arguments. It returns the exit code
// when parsing ends the run (0 for -h, 2 for bad usage), or -1.
func parseFlags(flags *flag.FlagSet, args []string, e env) int {
	flags.SetOutput(e.stderr)
	flags.Usage = func() {
		switch flags.Name() {
		case "init":
			fmt.Fprint(flags.Output(), "usage: signer init --dir DIR [--root]\n")
		case "health":
			fmt.Fprint(flags.Output(), "usage: signer health --socket PATH\n")
		case "ca-cert":
			fmt.Fprint(flags.Output(), "usage: signer ca-cert --ca DIR\n")
		default:
			fmt.Fprint(flags.Output(), "usage: signer serve --ca DIR --socket PATH --allow-uid UID [--allow-uid UID]... [flags]\n"+
				"  (signer --ca DIR ... is the same)\n")
		}
		flags.PrintDefaults()
	}
	if code, ok := cmdmain.Parse(flags, args); !ok {
		return code
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(e.stderr, "signer %s: unexpected argument %q; it takes flags only (see signer %s -h)\n", flags.Name(), flags.Arg(0), flags.Name())
		return 2
	}
	return -1
}

func runInit(args []string, e env) int {
	flags := flag.NewFlagSet("init", flag.ContinueOnError)
	dir := flags.String("dir", "", "the `DIR` to create the CA in (required; made with mode 0700 if missing)")
	root := flags.Bool("root", false, "make a fleet's root CA (path length one): it signs node signers' intermediates (signer serve --root)")
	if code := parseFlags(flags, args, e); code >= 0 {
		return code
	}
	if *dir == "" {
		fmt.Fprintln(e.stderr, "signer init: --dir is required: the directory to create the CA in")
		return 2
	}
	initCA := signer.InitCA
	if *root {
		initCA = signer.InitRootCA
	}
	ca, err := initCA(*dir, e.now(), rand.Reader)
	if err != nil {
		fmt.Fprintln(e.stderr, "signer:", err)
		return 1
	}
	signer.WriteInitSummary(e.stdout, ca, *dir, e.euid == 0)
	return 0
}

type serveOptions struct {
	init       bool
	exportCA   string
	caDir      string
	socket     string
	socketMode string
	allow      unixsock.UIDs
	dev        bool
	rate       float64
	burst      int
	metrics    string
	cmdmain.Flags
	// A fleet's gates over mutual TLS.
	tlsListen string
	tls       mtls.Flags
	tlsGates  mtls.Allow
	// A fleet's root signer (--root) and its node signers (--root-url).
	root     bool
	lifetime time.Duration
	permit   listFlag
	exclude  listFlag
	tlsNodes mtls.Allow
	rootURL  string
	rootCA   string
	tlsRoots mtls.Allow
}

func runServe(ctx context.Context, args []string, e env) int {
	flags := flag.NewFlagSet("serve", flag.ContinueOnError)
	o := serveOptions{}
	flags.StringVar(&o.caDir, "ca", "", "the CA `DIR` made by signer init (required)")
	flags.BoolVar(&o.init, "init", false, "create the CA in --ca first when it holds neither ca.pem nor ca-key.pem (a container's first start); an existing CA, or half of one, is never replaced")
	flags.StringVar(&o.exportCA, "export-ca", "", "copy ca.pem (the certificate only) into `DIR`, for the agents to trust")
	flags.StringVar(&o.socket, "socket", "", "unix socket `PATH` to serve on (required)")
	flags.StringVar(&o.socketMode, "socket-mode", "0660", "file `MODE` of the socket, octal")
	flags.Var(&o.allow, "allow-uid", "`UID` allowed to ask for certificates: the gate's (required, repeatable); other uids' connections are closed")
	flags.BoolVar(&o.dev, "dev", false, "local development: allow running as root")
	flags.Float64Var(&o.rate, "rate", signer.DefaultRate, "issue `N` certificates a second on average, across all callers")
	flags.IntVar(&o.burst, "burst", signer.DefaultBurst, "issue up to `N` certificates at once before --rate applies")
	o.Flags.DefineLogLevel(flags)
	flags.StringVar(&o.metrics, "metrics-listen", "", "also serve Prometheus metrics at /metrics on this TCP `ADDR` (host:port); empty: on the socket only (GET /metrics, for the allowed uids: the gate's -metrics-signer)")
	flags.StringVar(&o.tlsListen, "tls-listen", "", "also serve the gates of a fleet on this TCP `ADDR` (host:port) over mutual TLS (--tls-cert, --tls-key, --tls-ca): each proves a gate identity --tls-gate admits; empty: the socket only")
	o.tls.Register(flags)
	flags.Var(&o.tlsGates, "tls-gate", "an `IDENTITY` admitted over mutual TLS: spiffe://lockhttp/gate/NAME or spiffe://lockhttp/gate/* (repeatable; default spiffe://lockhttp/gate/*)")
	flags.BoolVar(&o.root, "root", false, "serve as a fleet's root signer: sign only the intermediates of the node signers --tls-node lists, over --tls-listen (the CA made by signer init --root)")
	flags.DurationVar(&o.lifetime, "intermediate-lifetime", signer.DefaultIntermediateLifetime, "with --root: how long an intermediate lives (`DURATION`); a node renews at two thirds of it, and a stolen node key signs for at most this long")
	flags.Var(&o.permit, "permit-dns", "with --root: a `DOMAIN` the intermediates may certify (and its subdomains), a name constraint every client checks (repeatable; default: any name)")
	flags.Var(&o.exclude, "exclude-dns", "with --root: a `DOMAIN` the intermediates may never certify (and its subdomains; repeatable)")
	flags.Var(&o.tlsNodes, "tls-node", "with --root: a node signer's `IDENTITY` (spiffe://lockhttp/signer/NAME, repeatable, required): the root signs for these only")
	flags.StringVar(&o.rootURL, "root-url", "", "serve as a node signer: get intermediates from the root signer at this `URL` (https://HOST:PORT, its --tls-listen) over mutual TLS with --tls-cert, --tls-key, --tls-ca; no --ca")
	flags.StringVar(&o.rootCA, "root-ca", "", "with --root-url: the root's certificate `FILE` (its ca.pem, the one agents trust); every intermediate must chain to it")
	flags.Var(&o.tlsRoots, "tls-root", "with --root-url: the root signer's `IDENTITY` (repeatable; default spiffe://lockhttp/signer/*)")
	if code := parseFlags(flags, args, e); code >= 0 {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(e.stderr, "signer serve: "+format+"\n", a...)
		return code
	}
	if o.root {
		return runRoot(ctx, o, e, fail)
	}
	if o.rootURL == "" && (o.rootCA != "" || !o.tlsNodes.Empty() || !o.tlsRoots.Empty() || len(o.permit)+len(o.exclude) > 0) {
		return fail(2, "--root-ca, --tls-root, --tls-node, --permit-dns and --exclude-dns serve a fleet's root (--root) or node signers (--root-url): give one")
	}
	switch {
	case o.rootURL != "" && (o.caDir != "" || o.init):
		return fail(2, "--root-url: a node signer holds no CA on disk; drop --ca and --init (the root signer holds the key)")
	case o.rootURL != "" && (o.rootCA == "" || o.tls.Check() != nil):
		return fail(2, "--root-url needs --root-ca (the root's ca.pem) and the node's identity for mutual TLS: --tls-cert, --tls-key, --tls-ca (lockhttp fleet issue signer NAME)")
	case len(o.permit)+len(o.exclude) > 0 || !o.tlsNodes.Empty():
		return fail(2, "--permit-dns, --exclude-dns and --tls-node are the root's (--root)")
	case o.caDir == "" && o.rootURL == "":
		return fail(2, "--ca is required: the CA directory made by `signer init --dir DIR`")
	case o.socket == "":
		return fail(2, "--socket is required: the unix socket the gate connects to")
	case len(o.allow) == 0 && o.tlsListen == "":
		return fail(2, "no --allow-uid: name the gate's uid (--allow-uid 10003 in compose), or serve a fleet's gates over mutual TLS (--tls-listen); the signer serves nobody else")
	case o.tlsListen != "" && o.tls.Check() != nil:
		return fail(2, "--tls-listen: %v", o.tls.Check())
	case o.tlsListen == "" && o.rootURL == "" && o.tls.Given():
		return fail(2, "--tls-cert, --tls-key, --tls-ca, --tls-crl and --tls-deny serve --tls-listen: give it")
	case o.rate <= 0:
		return fail(2, "--rate %v: use a positive number of certificates a second", o.rate)
	case o.burst < 1:
		return fail(2, "--burst %d: use at least 1", o.burst)
	}
	mode, err := strconv.ParseUint(o.socketMode, 8, 32)
	if err != nil || mode > 0o777 {
		return fail(2, "--socket-mode %q: use an octal file mode such as 0660", o.socketMode)
	}
	log, err := o.Logger(e.stderr)
	if err != nil {
		return fail(2, "--log-level %v", err)
	}
	if e.euid == 0 && !o.dev {
		return fail(1, "refusing to run as root: run the signer as its own user, the only one that can read the CA key (uid 10004 in compose); --dev allows root for local development")
	}
	if o.tlsGates.Empty() {
		o.tlsGates = mtls.MustAllow("spiffe://lockhttp/gate/*")
	}
	if slices.Contains(o.allow, e.euid) && !o.dev {
		log.Warn("an allowed uid is the signer's own: that process could read the CA key; run the gate as another user", "uid", e.euid)
	}

	var node *signer.Node
	if o.rootURL != "" {
		if node, err = newNode(o, e, log); err != nil {
			return fail(1, "%v", err)
		}
	}
	if o.init {
		// Only an empty CA directory is a first start: half a CA (a ca.pem without its key) is
		// refused by LoadCA below with the fix, never made whole with a new key.
		if err := signer.CheckFiles(o.caDir); errors.Is(err, signer.ErrNoCA) {
			ca, err := signer.InitCA(o.caDir, e.now(), rand.Reader)
			if err != nil {
				return fail(1, "%v", err)
			}
			log.Info("created the CA", "dir", o.caDir, "ca", ca)
		}
	}
	var ca *signer.CA
	trusted := func() []byte { return node.RootPEM() }
	if node == nil {
		if ca, err = signer.LoadCA(o.caDir); err != nil {
			return fail(1, "%v", err)
		}
		trusted = ca.CertPEM
	}
	if o.exportCA != "" {
		if err := atomicfile.WriteFile(filepath.Join(o.exportCA, signer.CertFile), trusted(), 0o644); err != nil {
			return fail(1, "--export-ca: %v", err)
		}
	}
	l, err := unixsock.Listen(o.socket, fs.FileMode(mode))
	if err != nil {
		return fail(1, "%v", err)
	}
	reg := metrics.NewRegistry("signer", buildinfo.Read().String())
	murl := ""
	if o.metrics != "" {
		ml, err := net.Listen("tcp", o.metrics)
		if err != nil {
			l.Close()
			return fail(1, "--metrics-listen %s: %v", o.metrics, err)
		}
		murl = metrics.URL(ml.Addr())
		go reg.Serve(ctx, ml)
	}
	srv := signer.NewServer(signer.ServerConfig{CA: ca, Node: node, AllowUIDs: o.allow, HealthUIDs: []int{e.euid}, Logger: log, Now: e.now, Rate: o.rate, Burst: o.burst,
		Metrics: metrics.NewSigner(reg), MetricsURL: murl, Registry: reg})
	if o.tlsListen != "" {
		if err := serveFleet(ctx, o, srv, log); err != nil {
			l.Close()
			return fail(1, "--tls-listen: %v", err)
		}
	}
	if node != nil {
		go node.Run(ctx)
	}
	log.Info("signer serving", "socket", o.socket, "root", o.rootURL, "socket_mode", fmt.Sprintf("%04o", mode), "allow_uids", []int(o.allow),
		"ca", caName(ca, node), "rate", o.rate, "burst", o.burst, "dev", o.dev)
	if err := srv.Serve(ctx, l); err != nil {
		return fail(1, "%v", err)
	}
	log.Info("signer stopped")
	return 0
}

// runHealth is the container's healthcheck: a signer listens on the socket. A socket file left
// by a signer that stopped refuses the connection, so the file alone proves nothing.
func runHealth(args []string, e env) int {
	flags := flag.NewFlagSet("health", flag.ContinueOnError)
	socket := flags.String("socket", "", "the signer's unix socket `PATH` (required)")
	if code := parseFlags(flags, args, e); code >= 0 {
		return code
	}
	if *socket == "" {
		fmt.Fprintln(e.stderr, "signer health: --socket is required: the socket signer serve listens on")
		return 2
	}
	c, err := net.DialTimeout("unix", *socket, 3*time.Second)
	if err != nil {
		fmt.Fprintf(e.stderr, "signer health: no signer listens on %s: %v\n", *socket, err)
		return 1
	}
	c.Close()
	fmt.Fprintf(e.stdout, "signer health: a signer listens on %s\n", *socket)
	return 0
}

// runCACert prints the CA's certificate: what agents trust, public.
func runCACert(args []string, e env) int {
	flags := flag.NewFlagSet("ca-cert", flag.ContinueOnError)
	dir := flags.String("ca", "", "the CA `DIR` (required)")
	if code := parseFlags(flags, args, e); code >= 0 {
		return code
	}
	if *dir == "" {
		fmt.Fprintln(e.stderr, "signer ca-cert: --ca is required: the CA directory")
		return 2
	}
	ca, err := signer.LoadCA(*dir)
	if err != nil {
		fmt.Fprintln(e.stderr, "signer ca-cert:", err)
		return 1
	}
	e.stdout.Write(ca.CertPEM())
	return 0
}
