package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/lockhttp/lockhttp/internal/stack"
)

const envUsage = `usage: lox env [--state DIR] [--format sh|fish|dotenv] [--name NAME]

Prints the proxy and CA variables of the running stack for an agent started by hand, the same
variables lox run -- COMMAND sets for the agent it starts:

  eval "$(lox env)"                     sh, bash, zsh
  lox env --format fish | source        fish
  lox env --format dotenv > .env        a .env file (docker --env-file, compose env_file)

Such an agent is not enclosed: it runs as your uid, so it can read the state directory and
approve its own tickets, and it can go round the gate (--noproxy, an IP literal, a resolver of
its own). sudo lox run -- COMMAND starts one as a uid of its own whose one way out is the gate.

flags:
`

func runEnv(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox env", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), envUsage)
		fs.PrintDefaults()
	}
	state := fs.String("state", ".lockfamily", "the stack's state directory (its up.json names the gate and the CA)")
	format := fs.String("format", "sh", "sh (also bash and zsh), fish, or dotenv")
	name := fs.String("name", "agent", "the agent's name in the proxy URL, which the audit records")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lox env: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	write, ok := envFormats[*format]
	if !ok {
		fmt.Fprintf(stderr, "lox env: --format %q: use sh, fish or dotenv\n", *format)
		return 2
	}
	if err := stack.CheckAgentName(*name); err != nil {
		fmt.Fprintln(stderr, "lox env:", strings.Replace(err.Error(), "--agent-name", "--name", 1))
		return 2
	}
	vars, proxy, err := handVars(*state, *name)
	if err != nil {
		fmt.Fprintln(stderr, "lox env:", err)
		return 1
	}
	out, err := write(vars, proxy)
	if err != nil {
		fmt.Fprintln(stderr, "lox env:", err)
		return 1
	}
	fmt.Fprintln(stderr, "lox env: an agent started by hand with these settings is not enclosed (it runs as your uid and can go round the gate); sudo lox run -- COMMAND encloses one")
	io.WriteString(stdout, out)
	return 0
}

// handVars are the variables of an agent started by hand: stack.AgentVars with the gate's proxy
// on the address it listens on (the loopback for a gate on every address), ca.pem and the state
// directory's bundle.
func handVars(state, name string) ([]stack.Var, string, error) {
	upPath := filepath.Join(state, stack.UpFile)
	data, err := os.ReadFile(upPath)
	if err != nil {
		return nil, "", fmt.Errorf("no running stack in %s (%v): start it with lox run, or name its state directory with --state", state, err)
	}
	var up stack.Up
	if err := json.Unmarshal(data, &up); err != nil {
		return nil, "", fmt.Errorf("%s: %w", upPath, err)
	}
	if up.CABundle == "" || up.CACert == "" {
		return nil, "", fmt.Errorf("%s names no CA bundle: the stack was started by an older lox; stop lox run and start it again", upPath)
	}
	addr, err := netip.ParseAddrPort(up.Listen)
	if err != nil {
		return nil, "", fmt.Errorf("%s: the gate's listen address %q: %v", upPath, up.Listen, err)
	}
	if addr.Addr().IsUnspecified() {
		lo := netip.MustParseAddr("127.0.0.1")
		if addr.Addr().Is6() {
			lo = netip.IPv6Loopback()
		}
		addr = netip.AddrPortFrom(lo, addr.Port())
	}
	proxy := stack.ProxyURL(name, addr)
	return stack.AgentVars(proxy, up.CACert, up.CABundle), proxy, nil
}

// envHeader is the comment every format starts with.
func envHeader(proxy string) string {
	return "# lockhttp: the proxy and CA settings lox run -- gives its agent, for an agent started by hand\n" +
		"# (lox env). The gate: " + proxy + ".\n" +
		"# Such an agent is NOT enclosed: it runs as your uid (it can read the state directory and approve\n" +
		"# its own tickets) and can go round the gate; sudo lox run -- COMMAND encloses one.\n"
}

// envFormats write the variables for a shell or a .env file.
var envFormats = map[string]func(vars []stack.Var, proxy string) (string, error){
	"sh": func(vars []stack.Var, proxy string) (string, error) {
		var b strings.Builder
		b.WriteString(envHeader(proxy))
		for _, v := range vars {
			fmt.Fprintf(&b, "export %s=%s\n", v.Name, shQuote(v.Value))
		}
		return b.String(), nil
	},
	"fish": func(vars []stack.Var, proxy string) (string, error) {
		var b strings.Builder
		b.WriteString(envHeader(proxy))
		for _, v := range vars {
			fmt.Fprintf(&b, "set -gx %s %s\n", v.Name, fishQuote(v.Value))
		}
		return b.String(), nil
	},
	"dotenv": func(vars []stack.Var, proxy string) (string, error) {
		var b strings.Builder
		b.WriteString(envHeader(proxy))
		for _, v := range vars {
			if err := dotenvValue(v.Value); err != nil {
				return "", fmt.Errorf("%s=%q: %w", v.Name, v.Value, err)
			}
			fmt.Fprintf(&b, "%s=%s\n", v.Name, v.Value)
		}
		return b.String(), nil
	},
}

// shQuote quotes s for a POSIX shell: in single quotes, where a quote of s ends them, is
// escaped with a backslash, and opens them again.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fishQuote quotes s for fish: in single quotes, where only \\ and \' are escapes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// dotenvValue refuses a value that the readers of .env files would not all read as written:
// docker --env-file takes the rest of the line as it is, compose strips quotes and white space
// and ends a value at " #". lox env writes values unquoted, so such a value cannot be written.
func dotenvValue(s string) error {
	switch {
	case strings.ContainsAny(s, "\r\n\x00"):
		return errors.New("a line break cannot be written in a .env file")
	case strings.TrimSpace(s) != s, strings.Contains(s, " #"), strings.Contains(s, "\t#"),
		strings.HasPrefix(s, "'"), strings.HasPrefix(s, `"`):
		return errors.New("docker and compose would read this value differently in a .env file; use a state directory (--state) whose path has no quotes, \" #\" or white space at its ends")
	}
	return nil
}
