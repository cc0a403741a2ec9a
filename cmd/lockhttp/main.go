// Command lockhttp is the operator's tool: check a setup (doctor), explain what the gate would
// decide for a request, verify the audit.
package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/layout"
	"github.com/lockhttp/lockhttp/internal/signer"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: lockhttp <command> [flags]

commands:
  doctor      is the setup sound? one line per check, with the fix (--compose PROJECT for compose)
  explain     what the gate would decide for a request (METHOD URL or a raw request), and why
  verify-log  check the audit files' chains
  ca init     create the lockhttp CA (the signer's key and the ca.pem agents trust)
  secrets add put a credential in the gate's secrets file: secrets add NAME --secrets FILE
              [--from-file F] (the value from F or stdin, never shown)
  volumes     prepare the compose setup's volumes (owners and modes) and the operator's policy
              directory (the shipped policy on the first start); runs as root, once
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "explain":
		return runExplain(args[1:], stdin, stdout, stderr)
	case "verify-log":
		return runVerifyLog(args[1:], stdout, stderr)
	case "secrets":
		return runSecrets(args[1:], stdin, stdout, stderr)
	case "volumes":
		return runVolumes(args[1:], stdout, stderr)
	case "ca":
		if len(args) < 2 || args[1] != "init" {
			fmt.Fprintln(stderr, "usage: lockhttp ca init --dir DIR")
			return 2
		}
		return runCAInit(args[2:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "lockhttp: unknown command %q\n%s", args[0], usage)
	return 2
}

func runVerifyLog(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp verify-log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: lockhttp verify-log DIR|FILE...") }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	var files []string
	for _, a := range fs.Args() {
		fi, err := os.Stat(a)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp verify-log:", err)
			return 2
		}
		if fi.IsDir() {
			m, _ := filepath.Glob(filepath.Join(a, "*.jsonl"))
			files = append(files, m...)
		} else {
			files = append(files, a)
		}
	}
	bad := 0
	for _, f := range files {
		n, err := audit.Verify(f)
		if err != nil {
			fmt.Fprintf(stdout, "BAD  %s: %v\n", f, err)
			bad++
			continue
		}
		fmt.Fprintf(stdout, "OK   %s: %d records\n", f, n)
	}
	if bad > 0 {
		return 1
	}
	return 0
}

func runCAInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp ca init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the `DIR` to create the CA in (required; made with mode 0700 if missing)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: lockhttp ca init --dir DIR")
		return 2
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
	done, err := layout.Prepare(*root)
	for _, d := range done {
		fmt.Fprintln(stdout, d)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp volumes:", err)
		return 1
	}
	if *policyDir != "" {
		done, err := layout.SeedPolicy(*policyDir, *shipped)
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
