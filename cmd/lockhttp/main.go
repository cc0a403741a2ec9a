// Command lockhttp is the operator's tool: check a setup (doctor) or a policy file (check),
// explain what the gate would decide for a request, verify the audit.
package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/layout"
	"github.com/lockhttp/lockhttp/internal/signer"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: lockhttp <command> [flags]

commands:
  doctor      is the setup sound? one line per check, with the fix (--compose PROJECT for compose)
  check       does a policy file load? every problem in it, each with its file:line and the fix
  explain     what the gate would decide for a request (METHOD URL or a raw request), and why
  propose     free rules learnt from what humans approved more than once and never denied, each a
              diff of the policy file with its counts (--state DIR, --since 7d); take one with
              :propose at the console's terminal
  verify-log  check the audit: chains, signatures, the signed head (--trusted-head, --pub,
              --dsn-file: every gate's chain in the database copy)
  audit       keygen (the audit key), checkpoint (copy the signed head out), migrate (the database)
  fleet       the identities of a fleet's processes for mutual TLS: init (the CA), issue KIND NAME,
              revoke (the revocation list)
  ca init     create the lockhttp CA (the signer's key and the ca.pem agents trust); never over
              an existing one, or half of one: --replace moves the old pair aside, on purpose
  secrets add put a credential in the gate's secrets file: secrets add NAME --secrets FILE
              [--from-file F] (the value from F or stdin, never shown)
  volumes     prepare the compose setup's volumes (owners and modes) and the operator's policy
              directory (the shipped policy on the first start); runs as root, once
  version     print lockhttp's version (module version, revision, build); also --version
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "explain":
		return runExplain(args[1:], stdin, stdout, stderr)
	case "verify-log":
		return runVerifyLog(args[1:], stdout, stderr)
	case "propose":
		return runPropose(args[1:], stdout, stderr)
	case "audit":
		return runAudit(args[1:], stdout, stderr)
	case "secrets":
		return runSecrets(args[1:], stdin, stdout, stderr)
	case "volumes":
		return runVolumes(args[1:], stdout, stderr)
	case "fleet":
		return runFleet(args[1:], stdout, stderr)
	case "ca":
		if len(args) < 2 || args[1] != "init" {
			fmt.Fprintln(stderr, "usage: lockhttp ca init [--replace] --dir DIR")
			return 2
		}
		return runCAInit(args[2:], stdout, stderr)
	case "version", "--version", "-version":
		cmdmain.PrintVersion(stdout, "lockhttp")
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "lockhttp: unknown command %q\n%s", args[0], usage)
	return 2
}

func runCAInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp ca init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the `DIR` to create the CA in (required; made with mode 0700 if missing)")
	replace := fs.Bool("replace", false, "replace the CA in DIR on purpose: move its ca.pem and ca-key.pem into DIR/replaced-TIME-N (nothing is deleted) and make a new one, which every agent must then trust")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: lockhttp ca init [--replace] --dir DIR")
		return 2
	}
	if *replace {
		ca, r, err := signer.ReplaceCA(*dir, time.Now(), rand.Reader)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp ca init:", err)
			return 1
		}
		signer.WriteReplaceSummary(stdout, ca, *dir, r, os.Geteuid() == 0)
		return 0
	}
	ca, err := signer.InitCA(*dir, time.Now(), rand.Reader)
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp ca init:", err)
		return 1
	}
	signer.WriteInitSummary(stdout, ca, *dir, os.Geteuid() == 0)
	return 0
}

func runVolumes(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp volumes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "/vol", "the `DIR` the volumes are mounted under")
	policyDir := fs.String("policy-dir", "", "the operator's policy `DIR` (a host directory): checked, and given the shipped policy on the first start")
	shipped := fs.String("shipped-policy", "", "the shipped policy `FILE` copied into --policy-dir when it has no policy.toml")
	subnet := fs.String("agent-subnet", "", "the agent network's `SUBNET` (LOCKHTTP_AGENT_SUBNET): the copied policy's [sources] names it")
	gateIP := fs.String("gate-ip", "", "the gate's `ADDRESS` on the agent network (LOCKHTTP_GATE_IP): it must be in --agent-subnet")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if (*policyDir == "") != (*shipped == "") {
		fmt.Fprintln(stderr, "lockhttp volumes: --policy-dir and --shipped-policy go together")
		return 2
	}
	var agentNet netip.Prefix
	if *subnet != "" || *gateIP != "" {
		var err error
		if agentNet, err = layout.AgentNetwork(*subnet, *gateIP); err != nil {
			fmt.Fprintln(stderr, "lockhttp volumes:", err)
			return 1
		}
	}
	done, err := layout.Prepare(*root)
	for _, d := range done {
		fmt.Fprintln(stdout, d)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp volumes:", err)
		return 1
	}
	if *policyDir != "" {
		done, err := layout.SeedPolicy(*policyDir, *shipped, agentNet)
		for _, d := range done {
			fmt.Fprintln(stdout, d)
		}
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp volumes:", err)
			return 1
		}
	}
	return 0
}
