// Command lox runs lockhttp's local stack in one terminal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/enclosure"
	"github.com/lockhttp/lockhttp/internal/stack"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: lox <command> [flags]

commands:
  run       start the local stack (signer, console with the hub, gate) and show its decisions;
            lox run [flags] -- COMMAND starts an agent in it, as a uid of its own (root only)
  tickets   list the pending tickets (--json for scripts)
  approve   approve a ticket: lox approve [--state DIR] ID
  deny      deny a ticket: lox deny [--state DIR] --reason TEXT ID
  pair      print a phone pairing link and its QR code
  credentials  list the Claude credentials bound to containers, by approval or issued through the gate (--json)
  unbind    remove one: lox unbind [--state DIR] CONTAINER HASH (its requests ask again)
  phones    list the paired phones (--json for scripts)
  unpair    revoke a paired phone at once: lox unpair [--state DIR] ID
  log       the gate's latest decisions from its audit; -f follows new ones
  env       print the proxy and CA variables for an agent started by hand (not enclosed):
            eval "$(lox env)"; --format fish or dotenv
  version   print lox's version (module version, revision, build); also --version
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return runRun(args[1:], stdout, stderr)
	case "tickets":
		return runTickets(args[1:], stdout, stderr)
	case "approve":
		return runDecide(true, args[1:], stdout, stderr)
	case "deny":
		return runDecide(false, args[1:], stdout, stderr)
	case "pair":
		return runPair(args[1:], stdout, stderr)
	case "credentials":
		return runCredentials(args[1:], stdout, stderr)
	case "unbind":
		return runUnbind(args[1:], stdout, stderr)
	case "phones":
		return runPhones(args[1:], stdout, stderr)
	case "unpair":
		return runUnpair(args[1:], stdout, stderr)
	case "log":
		return runLog(args[1:], stdout, stderr)
	case "env":
		return runEnv(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		cmdmain.PrintVersion(stdout, "lox")
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "lox: unknown command %q\n%s", args[0], usage)
	return 2
}

// errReported is parseRun's error when the flag package has already said what is wrong.
var errReported = errors.New("reported")

// parseRun reads lox run's arguments: flags, then optionally -- and the agent's command.
// operators are the uids the agent must not have (stack.OperatorUIDs).
func parseRun(args []string, stdout, stderr io.Writer, operators []int) (stack.Options, error) {
	fs := flag.NewFlagSet("lox run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: lox run [flags] [-- COMMAND [ARGS...]]\n\n"+
			"With a command, lox runs headless and starts COMMAND once the stack is up, as --agent-uid\n"+
			"(root only), in a network namespace whose one way out is the gate, trusting the lockhttp CA;\n"+
			"lox stops when it exits and exits with its status.\n\nflags:\n")
		fs.PrintDefaults()
	}
	o := stack.Options{Stdout: stdout, Stderr: stderr}
	fs.BoolVar(&o.Headless, "headless", false, "run without the terminal UI, for scripts")
	fs.BoolVar(&o.Follow, "follow", false, "with --headless: print a line for every decision")
	fs.StringVar(&o.StateDir, "state", ".lockfamily", "state directory: up.json, sockets, the CA, audit, logs; one stack at a time holds it (STATE/lock)")
	fs.StringVar(&o.PolicyPath, "policy", "", "policy file (default: STATE/policy.toml, created from the shipped default)")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:3130", "the gate's proxy address")
	fs.StringVar(&o.Upstream, "upstream", "", "an upstream proxy for the gate, http://host:port (for example squid); empty: direct. Never with a user:password part: give its credential with --upstream-credentials-file or "+egress.ProxyAuthEnv)
	fs.StringVar(&o.UpstreamCredentialsFile, "upstream-credentials-file", "", "a file holding the upstream proxy's credential, user:password on one line (mode 0600), for the gate; without it the gate takes "+egress.ProxyAuthEnv+" from lox's environment")
	fs.StringVar(&o.HubListen, "hub-listen", "127.0.0.1:3131", "the hub's address (the gate, lox's commands and the phone page reach it there)")
	fs.StringVar(&o.PhoneURL, "phone-url", "", "the URL a phone reaches the hub at, for the phone page's pairing links (default: http:// and the hub's address, 127.0.0.1 for a hub on every address; lox pair says when no phone reaches it)")
	fs.StringVar(&o.MetricsListen, "metrics-listen", "127.0.0.1:0", "where the gate, the console and the signer serve Prometheus metrics: HOST:PORT gives the gate PORT, the console PORT+1 and the signer PORT+2 (port 0: free ports); up.json names each URL under \"metrics\"; empty: none")
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "the gate exports a span of every request (decision attributes, no secret) to this OTLP/HTTP collector URL, such as http://127.0.0.1:4318; a request's traceparent header makes it a child of the agent's span; empty: none")
	fs.StringVar(&o.Secrets, "secrets", "", "the gate's secrets file (TOML, mode 0600): the credentials [[inject]] rules add; never shown to the agent")
	fs.StringVar(&o.ClaudeKeyFile, "claude-key-file", "", "a file holding a Claude API key: lox puts it in the gate's secrets file as \"anthropic\" (--secrets, default STATE/secrets.toml) for the shipped [[inject]] rule; with -- COMMAND the agent gets a placeholder ANTHROPIC_API_KEY, never the key (docs/claude-code.md)")
	fs.StringVar(&o.Roots, "roots", "", "PEM file of extra roots the gate trusts for origins (an internal CA); default: the system roots")
	fs.DurationVar(&o.RestartDelay, "restart-delay", stack.DefaultRestartDelay, "how long lox waits before it restarts a process of the stack (signer, console, gate) that exited; doubled for each further exit within a minute, and the fifth exit within a minute stops the stack")
	fs.StringVar(&o.BinDir, "bin", "", "directory of the gate and console binaries (default: next to lox, then PATH)")
	a := &stack.Agent{}
	fs.IntVar(&a.UID, "agent-uid", stack.DefaultAgentUID, "with -- COMMAND: the agent's uid and gid (never 0 or yours)")
	fs.StringVar(&a.Dir, "agent-dir", "", "with -- COMMAND: the agent's working directory and HOME, its own (default: a fresh one under $TMPDIR, kept)")
	fs.StringVar(&a.Name, "agent-name", "", "with -- COMMAND: the agent's name in the proxy URL and the audit (default: the command's base name)")
	fs.Func("agent-env", "with -- COMMAND: pass this variable of lox's environment to the agent (repeatable; by default it gets PATH, TERM, LANG, LC_*, TZ only)", func(name string) error {
		if err := stack.CheckPassName(name); err != nil {
			return err
		}
		a.Pass = append(a.Pass, name)
		return nil
	})
	fs.Func("enclosure-subnet", "with -- COMMAND: the IPv4 `CIDR` the agent's network enclosure takes its /30 from (the gate's address and the agent's): the first /30 no address of this machine overlaps (default "+enclosure.DefaultSubnet.String()+")", func(s string) error {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("give an IPv4 CIDR such as %s", enclosure.DefaultSubnet)
		}
		if err := enclosure.CheckSubnet(p); err != nil {
			return err
		}
		o.Enclosure.Subnet = p
		return nil
	})
	// The command is everything after the first --: its own flags are never lox's.
	var argv []string
	for i, arg := range args {
		if arg == "--" {
			args, argv = args[:i], args[i+1:]
			if len(argv) == 0 {
				return o, errors.New("nothing after --: give the agent's command, lox run [flags] -- COMMAND [ARGS...]")
			}
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, errReported
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q; to start an agent, put -- before its command", fs.Arg(0))
	}
	if o.Upstream != "" {
		if _, err := egress.ParseUpstream(o.Upstream); err != nil {
			return o, fmt.Errorf("--upstream %w", err)
		}
	} else if o.UpstreamCredentialsFile != "" {
		return o, errors.New("--upstream-credentials-file needs --upstream: the credential is the upstream proxy's")
	}
	if err := stack.CheckOTLPEndpoint(o.OTLPEndpoint); err != nil {
		return o, err
	}
	if o.RestartDelay <= 0 || o.RestartDelay > stack.MaxRestartDelay {
		return o, fmt.Errorf("--restart-delay %s: give a duration above 0 and at most %s (with a longer one, a process that keeps crashing would never exit five times within a minute, and never stop the stack)", o.RestartDelay, stack.MaxRestartDelay)
	}
	agentFlags := 0
	fs.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "agent-") || f.Name == "enclosure-subnet" {
			agentFlags++
		}
	})
	if argv == nil {
		if agentFlags > 0 {
			return o, errors.New("the --agent-* and --enclosure-subnet flags need a command: lox run [flags] -- COMMAND [ARGS...]")
		}
		return o, nil
	}
	if err := stack.CheckAgentUID(a.UID, operators); err != nil {
		return o, err
	}
	if a.Name != "" {
		if err := stack.CheckAgentName(a.Name); err != nil {
			return o, err
		}
	}
	a.Argv = argv
	o.Agent = a
	return o, nil
}

func runRun(args []string, stdout, stderr io.Writer) int {
	o, err := parseRun(args, stdout, stderr, stack.OperatorUIDs())
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errReported):
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "lox run:", err)
		return 2
	}
	if o.Agent == nil {
		ctx, stopSignals := cmdmain.Signals()
		defer stopSignals()
		if err := stack.Run(ctx, o); err != nil {
			fmt.Fprintln(stderr, "lox:", err)
			return 1
		}
		return 0
	}
	// With a command, lox's signals go to it (stack.Agent.Signals): the stack stops when it
	// exits.
	if !o.Headless {
		fmt.Fprintln(stderr, "lox: with a command, lox runs headless and the command has this terminal; decide tickets from another terminal (lox tickets, lox approve, lox deny) or a phone (lox pair)")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	o.Agent.Signals, o.Agent.Stdin = sigs, os.Stdin
	err = stack.Run(context.Background(), o)
	var exit *stack.ExitError
	switch {
	case errors.As(err, &exit):
		if exit.Err != nil {
			fmt.Fprintln(stderr, "lox:", exit.Err)
		}
		return exit.Code
	case err != nil:
		fmt.Fprintln(stderr, "lox:", err)
		return 125 // lox's own failure, as env(1) and docker run say it
	}
	return 0
}
