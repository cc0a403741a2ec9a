package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const checkUsage = `usage: lockhttp check FILE...

Load each policy file as the console does and print every problem found, one a line as
FILE:LINE: KEY: what is wrong and the fix, in file order (a TOML syntax error stops the reading
of its file). A file without problems gets one line: its version, rules and containers.
Exit status 0 when every file loads, 1 when one has problems, 2 when one cannot be read.
`

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, "lockhttp check: give the policy FILE to check\n"+checkUsage)
		return 2
	}
	status := 0
	for _, path := range fs.Args() {
		data, err := atomicfile.ReadFile(path, maxExplainPolicy)
		if err != nil {
			fmt.Fprintf(stderr, "lockhttp check: %v\n", err)
			status = 2
			continue
		}
		p, err := policy.Load(path, data)
		if err != nil {
			fmt.Fprintln(stdout, err) // policy.Errors: one problem a line, each with its file and line
			status = max(status, 1)
			continue
		}
		containers := "no containers ([sources] is empty: every connection is refused)"
		if names := p.Containers(); len(names) > 0 {
			containers = "containers " + strings.Join(names, ", ")
		}
		fmt.Fprintf(stdout, "%s: ok: policy %s, %d rules, %s\n", path, shortVersion(p.Version), p.RuleCount(), containers)
	}
	return status
}
