// Command lockhttp is the operator's tool: check a setup (doctor), explain what the gate would
// decide for a request, verify the audit.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/explain"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/layout"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secretfile"
	"github.com/lockhttp/lockhttp/internal/signer"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: lockhttp <command> [flags]

commands:
  doctor      is the setup sound? one line per check, with the fix (--compose PROJECT for compose)
  explain     what the gate would decide for a raw HTTP request, and why
  verify-log  check the audit files' chains
  ca init     create the lockhttp CA (the signer's key and the ca.pem agents trust)
  volumes     prepare the compose setup's volumes (owners and modes); runs as root, once
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

type resolveFlag map[string][]netip.Addr

func (r resolveFlag) String() string { return "" }
func (r resolveFlag) Set(s string) error {
	host, addr, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: write it as HOST=IP", s)
	}
	name, ref := floor.Host(host)
	if ref != nil {
		return fmt.Errorf("%q: %s", host, ref.Reason)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("%q: %q is not an IP address", s, addr)
	}
	r[name] = append(r[name], a)
	return nil
}

func runExplain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyPath := fs.String("policy", "", "the policy file (required)")
	container := fs.String("container", "", "the container the request comes from (default: the policy's only one)")
	resolve := resolveFlag{}
	fs.Var(resolve, "resolve", "HOST=IP: answer for a name instead of DNS (repeatable)")
	useDNS := fs.Bool("dns", false, "resolve names that --resolve and [floor.hosts] do not give with this machine's DNS")
	noDecrypt := fs.Bool("no-decrypt", false, "decide as a gate without a signer: every CONNECT at the domain")
	secretsFile := fs.String("secrets", "", "the gate's secrets file, for the checks of injected credentials")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lockhttp explain --policy FILE [--container NAME] [--resolve HOST=IP]... [--dns] [--no-decrypt] [--secrets FILE] REQUEST_FILE|-")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *policyPath == "" || fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	data, err := os.ReadFile(*policyPath)
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp explain:", err)
		return 2
	}
	pol, err := policy.Load(*policyPath, data)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var in io.Reader = stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp explain:", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	raw, err := io.ReadAll(io.LimitReader(in, 16<<20))
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp explain: reading the request:", err)
		return 2
	}
	insp, problems := secretfile.Inspect(pol, *secretsFile)
	for _, p := range problems {
		fmt.Fprintln(stderr, "lockhttp explain: note:", p)
	}
	o := explain.Options{Policy: pol, Container: *container, Resolve: resolve, NoDecrypt: *noDecrypt, Inspect: insp}
	if *useDNS {
		o.Resolver = net.DefaultResolver
	}
	res, err := explain.Request(context.Background(), raw, o)
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp explain:", err)
		return 2
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	enc.Encode(res)
	return 0
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
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
	return 0
}
