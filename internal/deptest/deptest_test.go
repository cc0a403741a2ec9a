package deptest

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/lockhttp/lockhttp/"

// pure are the packages that do no I/O and start no goroutines: the gate's decision,
// which a test can drive with values alone.
var pure = []string{
	"internal/policy",
	"internal/floor",
	"internal/fingerprint",
	"internal/claudeapi",
	"internal/secrets",
	"internal/judge",
	"internal/exfil",
	"internal/budget",
	"internal/jsonlex",
	// How a %XX escape and a hex digit are read, for every check that reads them.
	"internal/percent",
	"internal/wsframe",
	// Reads agent bytes from an io.Reader the gate hands it; it dials and listens for nothing.
	"internal/clienthello",
	// A decision as the bytes a client reads: the status line, headers and body of each form.
	"internal/refusal",
	// MCP's strict reading, call fingerprints, answer cuts and refusal bodies.
	"internal/mcp",
	// What a human or a model reads of a request's text; mcp escapes its findings with it.
	"internal/display",
	// Proposals learnt from what humans were asked: the audit and the decisions come in as values.
	"internal/propose",
	// Every binary's --version: it reads what the toolchain recorded, nothing else.
	"internal/buildinfo",
	// Not named pure, but the pure packages import it and it does no I/O: it is held to the same
	// rules.
	"internal/contentcoding",
}

// leaves are packages of this module outside the pure set that a pure package may import, for
// the reason given. Their own imports are not checked: a leaf is a known exception, to be kept
// small.
var leaves = map[string]string{
	"internal/framing": "judge reads its Error type; framing itself wraps net.Conn",
}

// forbidden are the standard packages a pure package must not import, with why.
var forbidden = map[string]string{
	"os":                "the file system, the environment and processes",
	"os/exec":           "running programs",
	"os/signal":         "signals",
	"os/user":           "the user database",
	"syscall":           "system calls",
	"path/filepath":     "walking and resolving the file system",
	"io/ioutil":         "the file system",
	"plugin":            "loading code",
	"net":               "dialling and listening (net/netip, net/url and net/http's types are fine)",
	"net/http/httptest": "servers",
	"net/http/pprof":    "a debug server",
	"net/rpc":           "the network",
	"net/smtp":          "the network",
	"log":               "a global logger (inject a *slog.Logger, or return the finding)",
	"log/slog":          "logging: the caller logs the decision",
	"log/syslog":        "logging",
	"crypto/rand":       "global randomness (inject it)",
	"math/rand":         "global randomness (inject it)",
	"math/rand/v2":      "global randomness (inject it)",
}

// thirdParty are the packages from other modules that a pure package may import directly. Their
// own imports are not checked (toml, for one, imports os for DecodeFile, which no pure package
// calls); a new one is added here on purpose, after reading what it does.
var thirdParty = map[string]bool{
	"github.com/BurntSushi/toml":    true,
	"golang.org/x/net/idna":         true,
	"golang.org/x/net/publicsuffix": true,
	"github.com/andybalholm/brotli": true,
}

type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Error      *struct{ Err string }
	Module     *struct{ Path string }
}

// list returns the packages that patterns import, transitively, as go list sees them for goos.
func list(t *testing.T, goos string, patterns []string) map[string]pkg {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	cmd := exec.Command(goTool, append([]string{"list", "-deps", "-json=ImportPath,Standard,Imports,Error,Module"}, patterns...)...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list (GOOS=%s): %v\n%s", goos, err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// TestPurePackages walks each pure package and the packages of this module it reaches, and
// checks every import of each: no forbidden standard package, of this module only pure packages
// and leaves, and of other modules only thirdParty. A failure names the pure package, the path
// to the importer and what it imports.
func TestPurePackages(t *testing.T) {
	isPure := map[string]bool{}
	var patterns []string
	for _, p := range pure {
		isPure[module+p] = true
		patterns = append(patterns, module+p)
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			pkgs := list(t, goos, patterns)
			for _, root := range patterns {
				for _, v := range violations(pkgs, root, isPure) {
					t.Error(v)
				}
			}
		})
	}
}

// violations walks root through the pure packages it imports and returns what each imports that
// it must not.
func violations(pkgs map[string]pkg, root string, isPure map[string]bool) []string {
	var out []string
	via := map[string]string{root: ""} // package → the pure package that imported it first
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[p].Imports {
			why := ""
			switch {
			case forbidden[imp] != "":
				why = forbidden[imp]
			case strings.HasPrefix(imp, module):
				if isPure[imp] {
					if _, seen := via[imp]; !seen {
						via[imp] = p
						queue = append(queue, imp)
					}
					continue
				}
				if _, ok := leaves[strings.TrimPrefix(imp, module)]; ok {
					continue
				}
				why = "a package of this module outside the pure set; add it to pure, or to leaves with a reason"
			case pkgs[imp].Standard:
				continue
			case !thirdParty[imp]:
				why = "a package of another module; add it to thirdParty after reading what it does"
			}
			if why != "" {
				out = append(out, short(root)+": "+chain(via, p)+" imports "+strings.TrimPrefix(imp, module)+": "+why)
			}
		}
	}
	slices.Sort(out)
	return out
}

// chain is the import path from the walk's root to p: "judge → claudeapi".
func chain(via map[string]string, p string) string {
	var path []string
	for ; p != ""; p = via[p] {
		path = append(path, short(p))
	}
	slices.Reverse(path)
	return strings.Join(path, " → ")
}

func short(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "internal/") }

// TestViolations checks the walk on a made-up graph, so that TestPurePackages cannot pass by a
// walk that finds nothing.
func TestViolations(t *testing.T) {
	m := func(p string) string { return module + "internal/" + p }
	pkgs := map[string]pkg{
		m("judge"):     {ImportPath: m("judge"), Imports: []string{"fmt", m("claudeapi"), m("framing")}},
		m("claudeapi"): {ImportPath: m("claudeapi"), Imports: []string{"os", m("gate"), "github.com/evil/http"}},
		m("framing"):   {ImportPath: m("framing"), Imports: []string{"net"}},
		m("gate"):      {ImportPath: m("gate"), Imports: []string{"net"}},
		"fmt":          {ImportPath: "fmt", Standard: true},
		"os":           {ImportPath: "os", Standard: true},
		"net":          {ImportPath: "net", Standard: true},
	}
	isPure := map[string]bool{m("judge"): true, m("claudeapi"): true}
	got := violations(pkgs, m("judge"), isPure)
	want := []string{
		"judge: judge → claudeapi imports github.com/evil/http: a package of another module; add it to thirdParty after reading what it does",
		"judge: judge → claudeapi imports internal/gate: a package of this module outside the pure set; add it to pure, or to leaves with a reason",
		"judge: judge → claudeapi imports os: " + forbidden["os"],
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
