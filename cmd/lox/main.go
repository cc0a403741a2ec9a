// Command lox runs lockhttp's local stack in one terminal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/stack"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: lox <command> [flags]

commands:
  run       start the local stack (signer, console with the hub, gate) and show its decisions
  tickets   list the pending tickets (--json for scripts)
  approve   approve a ticket: lox approve [--state DIR] ID
  deny      deny a ticket: lox deny [--state DIR] --reason TEXT ID
  pair      print a phone pairing link and its QR code
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
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "lox: unknown command %q\n%s", args[0], usage)
	return 2
}

func runRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := stack.Options{Stdout: stdout, Stderr: stderr}
	fs.BoolVar(&o.Headless, "headless", false, "run without the terminal UI, for scripts")
	fs.BoolVar(&o.Follow, "follow", false, "with --headless: print a line for every decision")
	fs.StringVar(&o.StateDir, "state", ".lockfamily", "state directory: up.json, sockets, audit, logs")
	fs.StringVar(&o.PolicyPath, "policy", "", "policy file (default: STATE/policy.toml, created from the shipped default)")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:3130", "the gate's proxy address")
	fs.StringVar(&o.Upstream, "upstream", "", "an upstream proxy for the gate, http://host:port (for example squid); empty: direct")
	fs.StringVar(&o.HubListen, "hub-listen", "127.0.0.1:3131", "the hub's address (the gate, lox's commands and the phone page reach it there)")
	fs.StringVar(&o.PhoneURL, "phone-url", "", "the URL a phone reaches the hub at, for the phone page (default: http:// and the hub's address)")
	fs.StringVar(&o.Secrets, "secrets", "", "the gate's secrets file (TOML, mode 0600): the credentials [[inject]] rules add; never shown to the agent")
	fs.StringVar(&o.Roots, "roots", "", "PEM file of extra roots the gate trusts for origins (an internal CA); default: the system roots")
	fs.StringVar(&o.BinDir, "bin", "", "directory of the gate and console binaries (default: next to lox, then PATH)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lox run: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if err := stack.Run(ctx, o); err != nil {
		fmt.Fprintln(stderr, "lox:", err)
		return 1
	}
	return 0
}
