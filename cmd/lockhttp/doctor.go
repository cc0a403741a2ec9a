package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/buildinfo"
	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/doctor"
	"github.com/lockhttp/lockhttp/internal/mtls"
)

const doctorUsage = `usage:
  lockhttp doctor [--state DIR] [--json]          the local stack (lox run)
  lockhttp doctor --compose PROJECT [--json] [--tools-image IMAGE] [--direct HOST:PORT]... [--dns NAME]
      PROJECT is the compose project's name, or a deployment directory (one with a "/", or ".")
      whose .env names it (COMPOSE_PROJECT_NAME, as compose/new-site.sh writes it)
  lockhttp doctor --console https://HOST:PORT --tls-cert F --tls-key F --tls-ca F [--json]
      a fleet's console over mutual TLS (its -tls-listen), with a facade's identity: the policy
      it serves and the version each gate last fetched
  lockhttp doctor --signer SOCKET [--json]
      a signer alone, on its unix socket: for a fleet's node signer, the chain (leaf, its
      intermediate, the root), the intermediate's expiry and the last renewal

One line per check: OK, WARN (works, look at it) or ERROR (will not work), with the fix.
Exit status 2 when any check is an ERROR.
`

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func runDoctor(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "probe-agent":
			return runProbeAgent(args[1:], stdout, stderr)
		case "inside-compose":
			return runInsideCompose(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage); fs.PrintDefaults() }
	state := fs.String("state", ".lockfamily", "the local stack's state directory (lox run --state)")
	project := fs.String("compose", "", "examine the docker compose `PROJECT` instead of a local stack")
	tools := fs.String("tools-image", "", "the image with the lockhttp binary (default: the project's volumes service image)")
	dns := fs.String("dns", "example.com", "an outside `NAME` the agent network must not resolve")
	var direct listFlag
	fs.Var(&direct, "direct", "a `HOST:PORT` outside that the agent network must not reach (repeatable)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fleetConsole := fs.String("console", "", "examine a fleet's console at `URL` (https://HOST:PORT, its -tls-listen) over mutual TLS, with --tls-cert, --tls-key and --tls-ca (a facade's identity)")
	signerSock := fs.String("signer", "", "examine the signer on this unix socket `PATH` alone (a fleet's node signer: its chain, its intermediate's expiry and the last renewal)")
	var ident mtls.Flags
	ident.Register(fs)
	var consoles mtls.Allow
	fs.Var(&consoles, "tls-console", "an identity the console must prove (repeatable; default spiffe://lockhttp/console/*)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lockhttp doctor: unexpected %q\n%s", fs.Arg(0), doctorUsage)
		return 2
	}
	ctx, stop := cmdmain.Signals()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var f *doctor.Facts
	if *signerSock != "" {
		f = doctor.GatherSigner(ctx, *signerSock)
	} else if *fleetConsole != "" {
		src, err := ident.Load(nil)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp doctor --console:", err)
			return 2
		}
		if consoles.Empty() {
			consoles = mtls.MustAllow("spiffe://lockhttp/console/*")
		}
		f = doctor.GatherFleet(ctx, *fleetConsole, src.ClientConfig(consoles))
	} else if ident.Given() {
		fmt.Fprintln(stderr, "lockhttp doctor: --tls-cert, --tls-key and --tls-ca are for --console")
		return 2
	} else if *project != "" {
		name, err := composeProject(*project)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp doctor:", err)
			return 2
		}
		*project = name
		f = doctor.GatherCompose(ctx, doctor.Compose{Project: *project, ToolsImage: *tools, Direct: direct, DNSName: *dns})
	} else {
		f = doctor.GatherLocal(ctx, *state)
	}
	f.Version = buildinfo.Read().String()
	r := doctor.Assess(f)
	if *asJSON {
		r.WriteJSON(stdout)
	} else {
		r.Write(stdout)
	}
	if r.Worst() == doctor.Error {
		return 2
	}
	return 0
}

// runProbeAgent runs on the agent network (lockhttp doctor --compose starts it there) and prints
// its facts as JSON.
func runProbeAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor probe-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	proxy := fs.String("proxy", "", "the gate's proxy URL")
	ca := fs.String("ca", "", "the lockhttp CA file")
	dns := fs.String("dns", "", "an outside name to look up")
	var direct, host, udp, peer listFlag
	fs.Var(&peer, "peer", "HOST:PORT=WHAT, another agent on the agent network, to connect to directly (repeatable)")
	fs.Var(&direct, "direct", "HOST:PORT=WHAT outside, to connect to directly (repeatable)")
	fs.Var(&host, "host", "HOST:PORT=WHAT on this machine, to connect to directly (repeatable)")
	fs.Var(&udp, "udp", "HOST:PORT=WHAT on this machine, to send a datagram to (repeatable)")
	nonce := fs.String("nonce", "", "what the datagrams carry, for the doctor to know them")
	transparent := fs.Bool("transparent", false, "ask http://lockhttp.internal/ ignoring the proxy (the gate's transparent listener)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := doctor.AgentProbe{DNSName: *dns, Nonce: *nonce, Transparent: *transparent}
	for _, d := range udp {
		target, what, _ := strings.Cut(d, "=")
		p.UDP = append(p.UDP, doctor.Direct{Target: target, What: what})
	}
	for _, d := range direct {
		target, what, _ := strings.Cut(d, "=")
		p.Direct = append(p.Direct, doctor.Direct{Target: target, What: what})
	}
	for _, d := range host {
		target, what, _ := strings.Cut(d, "=")
		p.Host = append(p.Host, doctor.Direct{Target: target, What: what})
	}
	for _, d := range peer {
		target, what, _ := strings.Cut(d, "=")
		p.Peers = append(p.Peers, doctor.Direct{Target: target, What: what})
	}
	out := struct {
		Agent *doctor.AgentFacts `json:"agent"`
		Self  *doctor.SelfFacts  `json:"self,omitempty"`
	}{Agent: doctor.ProbeAgent(ctx, p)}
	if *proxy != "" {
		out.Self = doctor.SelfRequests(ctx, *proxy, *ca)
	}
	json.NewEncoder(stdout).Encode(out)
	return 0
}

// runInsideCompose runs in a container with the project's volumes (lockhttp doctor --compose
// starts it) and prints the services' facts as JSON.
func runInsideCompose(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor inside-compose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	auditID := fs.String("audit-id", "", "a request id to find in the gate's audit")
	asGate := fs.Bool("as-gate", false, "the part that runs as the gate's uid")
	secrets := fs.String("secrets", "", "the gate's secrets file, to load as the gate does")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if *asGate {
		json.NewEncoder(stdout).Encode(doctor.GatherAsGate(ctx, *auditID, *secrets))
		return 0
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp doctor:", err)
		return 1
	}
	json.NewEncoder(stdout).Encode(doctor.GatherInside(ctx, self, *auditID, *secrets))
	return 0
}

// composeProject is the project --compose names: v itself, or, when v is a directory (".", or a
// path with a "/"), the COMPOSE_PROJECT_NAME of its .env, which docker-compose uses there.
func composeProject(v string) (string, error) {
	if v != "." && !strings.Contains(v, "/") {
		return v, nil
	}
	envFile := filepath.Join(v, ".env")
	f, err := os.Open(envFile)
	if err != nil {
		return "", fmt.Errorf("--compose %s: %w; fix: name a deployment directory (compose/new-site.sh makes one) or the project itself", v, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	name := ""
	for sc.Scan() {
		if k, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok && strings.TrimSpace(k) == "COMPOSE_PROJECT_NAME" {
			name = strings.Trim(strings.TrimSpace(val), `"'`)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", envFile, err)
	}
	if name == "" {
		return "", fmt.Errorf("%s has no COMPOSE_PROJECT_NAME; fix: add COMPOSE_PROJECT_NAME=NAME there (the name docker-compose gives the project), or pass the project's name", envFile)
	}
	return name, nil
}
