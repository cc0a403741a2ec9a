package deptest

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// binary is what one command of this module may link. A process boundary shows here: what
// crosses a socket is in a contract package (signerapi, hubapi, consoleapi, gateapi) that both sides
// import, so a process links its peers' contracts and clients, never their servers.
type binary struct {
	cmd string // the command's path in the module (or a package's, for TestContracts)
	// forbidden are packages of this module the binary must not link, with why.
	forbidden map[string]string
	// only, when not nil, are the only packages of this module the binary may link.
	only []string
	// modules, when not nil, are the only other modules the binary may link (the standard
	// library is always allowed).
	modules []string
	// requires are packages of this module the binary must link, with why.
	requires map[string]string
	// foreign are packages of other modules the binary must not link, each with why and the
	// only packages that may import it (none: no package may).
	foreign map[string]foreignRule
}

// foreignRule keeps a package of another module out of a binary, but for the importers in via.
type foreignRule struct {
	why string
	via []string
}

// gateInternals are the packages only the gate needs: its servers, its decision and what it
// reads of an agent's traffic.
var gateInternals = map[string]string{
	"internal/gate":        "the gate's server",
	"internal/gatefiles":   "the gate's files",
	"internal/judge":       "the gate's decision (explain links it; the console does not decide)",
	"internal/egress":      "the gate's dialler",
	"internal/framing":     "the gate's check of an agent's framing",
	"internal/wsframe":     "the gate's reading of WebSocket frames",
	"internal/clienthello": "the gate's transparent TLS listener",
	"internal/dnsanswer":   "the gate's DNS answers",
	"internal/tracing":     "the gate's trace exporter",
	"internal/auditdb":     "the gate's copy of the audit to a database",
	"internal/transport":   "the gate's HTTP/1.1 server, upstream pool and tunnels",
	"internal/refusal":     "the gate's refusals, as the bytes a client reads",
}

var binaries = []binary{{
	cmd: "cmd/gate",
	forbidden: map[string]string{
		"internal/signer":  "the CA key's package: only the signer process holds it (the gate speaks signerapi through signerclient)",
		"internal/console": "the policy's owner (the gate reads the served policy, consoleapi, through consoleclient)",
		"internal/hub":     "the tickets' holder and the decisions' signing key (the gate speaks hubapi through hubclient)",
		"internal/hubdb":   "the hub's tickets in PostgreSQL: only the console/hub writes them",
		"internal/notify":  "the console's notification channels",
		"internal/tui":     "the console's terminal",
		"internal/phone":   "the hub's phone page",
	},
	// The gate is cut along its jobs: its I/O with clients and origins, its decision and its
	// refusals' bytes, each a package of its own under the request pipeline.
	requires: map[string]string{
		"internal/transport": "its HTTP/1.1 server, upstream pool, HTTP/2 watch and tunnels",
		"internal/judge":     "every decision and every outcome it reports",
		"internal/refusal":   "a decision as the bytes a client reads",
	},
	// pgx's driver and its type registry cost the gate's binary about 4 MB, mapped in every gate
	// for the few statements of its audit's database copy: auditdb speaks PostgreSQL's protocol
	// through pgconn alone and reads the text of the results itself. pgconn imports pgtype for one
	// constant (TextFormatCode), of which the linker keeps the package's init (about 5 KB), so
	// pgconn alone may import it. The console's hubdb keeps pgx.
	foreign: map[string]foreignRule{
		"github.com/jackc/pgx/v5": {why: "pgx's driver, its type registry and statement cache (about 4 MB of the binary): auditdb speaks PostgreSQL through pgconn"},
		"github.com/jackc/pgx/v5/pgtype": {why: "pgx's type registry: auditdb reads the results' text itself, and only pgconn may import it (for one constant)",
			via: []string{"github.com/jackc/pgx/v5/pgconn"}},
	},
	// Of other modules: the policy's TOML, brotli (bodies the gate reads), PostgreSQL's protocol
	// (pgconn, of pgx's module: auditdb), go-spiffe's X.509-SVID checks, the fallback roots and
	// the x/ modules. No Prometheus client or protobuf: internal/metrics writes the text format
	// itself (TestNoMetricsClient). No OpenTelemetry SDK or gRPC: the trace exporter writes
	// OTLP itself (internal/tracing), as most gates never turn it on. The official MCP SDK and
	// what it needs (jsonschema-go, segmentio's JSON, uritemplate, x/oauth2 and x/sync): the
	// gate's own MCP server to the agents (gate/selfmcp.go), whose protocol revisions are the
	// SDK's to get right; it costs the binary about 2.8 MB.
	modules: []string{
		"github.com/modelcontextprotocol/go-sdk", "github.com/google/jsonschema-go", "github.com/segmentio/encoding",
		"github.com/segmentio/asm", "github.com/yosida95/uritemplate/v3", "golang.org/x/oauth2", "golang.org/x/sync",
		"github.com/BurntSushi/toml", "github.com/andybalholm/brotli",
		"github.com/jackc/pgx/v5", "github.com/jackc/pgpassfile", "github.com/jackc/pgservicefile",
		"github.com/spiffe/go-spiffe/v2", "golang.org/x/crypto/x509roots/fallback",
		"golang.org/x/net", "golang.org/x/sys", "golang.org/x/text", "golang.org/x/time",
	},
}, {
	cmd: "cmd/signer",
	// The signer's process holds the CA key: it links its own server, the contract it serves,
	// how a host is normalised (and the hex digits floor reads with), its socket, atomic writes,
	// the shared leaves (display, httpjson, the metric names, --version, every binary's start),
	// the listener of mutual TLS a fleet's gates reach it on (mtls, the identities; connlimit,
	// its caps) and nothing else of this module: no gate, hub or console code and none of the
	// project's network clients (signerclient, hubclient, consoleclient).
	only: []string{
		"internal/signer", "internal/signerapi", "internal/floor", "internal/percent", "internal/unixsock", "internal/atomicfile",
		"internal/display", "internal/httpjson", "internal/metrics", "internal/buildinfo", "internal/cmdmain",
		"internal/mtls", "internal/connlimit",
	},
	// Of other modules: the token bucket, the x/ modules under floor's host names, and
	// go-spiffe's identity and X.509-SVID packages (mtls: of the standard library alone, not its
	// workload API). Its metrics page (on the socket and on --metrics-listen) is internal/metrics',
	// of the standard library alone. No other network client (OTLP, gRPC, a database driver,
	// WebSocket).
	modules: []string{
		"golang.org/x/time", "golang.org/x/net", "golang.org/x/text", "golang.org/x/sys",
		"github.com/spiffe/go-spiffe/v2",
	},
}, {
	cmd: "cmd/console",
	forbidden: merge(gateInternals, map[string]string{
		"internal/signer":        "the CA key's package: only the signer process holds it",
		"internal/signerclient":  "the gate's client of the signer",
		"internal/signerapi":     "the signer's socket, which the console never speaks",
		"internal/hubclient":     "the gate's and lox's client of the hub the console hosts",
		"internal/consoleclient": "the gate's client of the console",
	}),
}, {
	cmd: "cmd/lox",
	// lox starts the stack's binaries and reads their state (gateapi, consoleapi, signerapi); it
	// runs none of their servers in its process. It still links, for what it needs: the policy
	// and judge (through gatefiles, whose Put writes the gate's secrets file), egress (its
	// --upstream is checked as the gate checks it), the signer (whether the CA's files are there)
	// and the hub (through the phone page's table of paired phones, lox phones).
	forbidden: map[string]string{
		"internal/gate":         "the gate's server (lox reads its status, gateapi)",
		"internal/tracing":      "the gate's trace exporter",
		"internal/auditdb":      "the gate's copy of the audit to a database",
		"internal/wsframe":      "the gate's reading of WebSocket frames",
		"internal/clienthello":  "the gate's transparent TLS listener",
		"internal/dnsanswer":    "the gate's DNS answers",
		"internal/signerclient": "the gate's client of the signer",
		"internal/console":      "the console's server (lox reads its status and policy, consoleapi)",
		"internal/hubdb":        "the hub's tickets in PostgreSQL (lox reaches them through the hub's API)",
		"internal/notify":       "the console's notification channels",
		"internal/tui":          "the console's terminal",
		"internal/transport":    "the gate's HTTP/1.1 server, upstream pool and tunnels",
	},
}}

// layers are the gate's parts under its request pipeline, each held to linking none of what is
// above it.
var layers = []binary{{
	cmd: "internal/transport",
	forbidden: map[string]string{
		"internal/gate":  "the request pipeline above it (transport is its I/O)",
		"internal/judge": "the decision: transport moves bytes and decides nothing",
	},
}, {
	cmd: "internal/refusal",
	forbidden: map[string]string{
		"internal/gate":      "the request pipeline above it",
		"internal/judge":     "the decision: refusal renders one, it makes none",
		"internal/transport": "I/O: refusal turns a decision into bytes, the gate writes them",
	},
}}

// TestLayers holds each of the gate's parts to linking nothing above it.
func TestLayers(t *testing.T) {
	var patterns []string
	for _, l := range layers {
		patterns = append(patterns, module+l.cmd)
	}
	all := list(t, "linux", patterns)
	for _, l := range layers {
		for _, v := range linkViolations(all, l) {
			t.Error(v)
		}
	}
}

// contracts are the packages of what crosses a socket; each links neither server nor client.
var contracts = []string{"internal/signerapi", "internal/hubapi", "internal/consoleapi", "internal/gateapi"}

// servesOrCalls are the servers and clients a contract must not link: both sides import it.
var servesOrCalls = map[string]string{
	"internal/signer":        "a server",
	"internal/hub":           "a server",
	"internal/hubdb":         "the hub's store",
	"internal/console":       "a server",
	"internal/gate":          "a server",
	"internal/notify":        "the console's notification channels",
	"internal/tui":           "the console's terminal",
	"internal/phone":         "the hub's phone page",
	"internal/signerclient":  "a client",
	"internal/hubclient":     "a client",
	"internal/consoleclient": "a client",
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// TestBinaries holds each command to what it may link: go list -deps of the command, for linux.
// A failure names the binary, the package and the import path that brings it in.
func TestBinaries(t *testing.T) {
	var patterns []string
	for _, b := range binaries {
		patterns = append(patterns, module+b.cmd)
	}
	all := list(t, "linux", patterns)
	for _, b := range binaries {
		t.Run(strings.TrimPrefix(b.cmd, "cmd/"), func(t *testing.T) {
			for _, v := range linkViolations(all, b) {
				t.Error(v)
			}
		})
	}
}

// TestContracts holds each contract package to linking no server and no client.
func TestContracts(t *testing.T) {
	var patterns []string
	for _, c := range contracts {
		patterns = append(patterns, module+c)
	}
	all := list(t, "linux", patterns)
	for _, c := range contracts {
		for _, v := range linkViolations(all, binary{cmd: c, forbidden: servesOrCalls}) {
			t.Error(v)
		}
	}
}

// linkViolations walks what b's command imports, transitively, and returns each package it must
// not link with the path that links it.
func linkViolations(pkgs map[string]pkg, b binary) []string {
	root := module + b.cmd
	via := map[string]string{root: ""}
	queue := []string{root}
	var out []string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[p].Imports {
			// Every import of a foreign package is checked, not only the first: what may import it
			// is the rule.
			if r, ok := b.foreign[imp]; ok && !slices.Contains(r.via, p) {
				out = append(out, b.cmd+" links "+imp+" ("+linkChain(via, p)+" → "+imp+"): "+r.why)
			}
			if _, seen := via[imp]; seen {
				continue
			}
			via[imp] = p
			queue = append(queue, imp)
			why := ""
			switch rel, ours := strings.CutPrefix(imp, module); {
			case ours && b.forbidden[rel] != "":
				why = b.forbidden[rel]
			case ours && b.only != nil && !slices.Contains(b.only, rel):
				why = "not among the packages of this module it may link; add it to the binary's list after reading why it must"
			case !ours && !pkgs[imp].Standard && b.modules != nil && !slices.ContainsFunc(b.modules, func(m string) bool { return imp == m || strings.HasPrefix(imp, m+"/") }):
				why = "a package of a module it may not link; add the module to the binary's list after reading what it does"
			}
			if why != "" {
				out = append(out, b.cmd+" links "+strings.TrimPrefix(imp, module)+" ("+linkChain(via, imp)+"): "+why)
			}
		}
	}
	for rel, why := range b.requires {
		if _, linked := via[module+rel]; !linked {
			out = append(out, b.cmd+" does not link "+rel+": "+why)
		}
	}
	slices.Sort(out)
	return out
}

// linkChain is the import path from the command to p: "cmd/gate → gate → hub".
func linkChain(via map[string]string, p string) string {
	var path []string
	for ; p != ""; p = via[p] {
		path = append(path, short(p))
	}
	slices.Reverse(path)
	return strings.Join(path, " → ")
}

// TestLinkViolations checks the walk on a made-up graph, so that TestBinaries cannot pass by a
// walk that finds nothing.
func TestLinkViolations(t *testing.T) {
	m := func(p string) string { return module + p }
	pkgs := map[string]pkg{
		m("cmd/x"):           {ImportPath: m("cmd/x"), Imports: []string{"fmt", m("internal/gate"), "github.com/some/otel/exporter"}},
		m("internal/gate"):   {ImportPath: m("internal/gate"), Imports: []string{m("internal/hub"), m("internal/hubapi")}},
		m("internal/hub"):    {ImportPath: m("internal/hub"), Imports: []string{m("internal/hubapi"), "golang.org/x/time/rate"}},
		m("internal/hubapi"): {ImportPath: m("internal/hubapi"), Imports: []string{"time"}},
		"fmt":                {ImportPath: "fmt", Standard: true},
		"time":               {ImportPath: "time", Standard: true},
	}
	got := linkViolations(pkgs, binary{cmd: "cmd/x", forbidden: map[string]string{"internal/hub": "a server"}})
	want := []string{"cmd/x links internal/hub (cmd/x → gate → hub): a server"}
	if !slices.Equal(got, want) {
		t.Errorf("forbidden:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = linkViolations(pkgs, binary{cmd: "cmd/x", only: []string{"internal/gate", "internal/hubapi"}, modules: []string{"golang.org/x/time"}})
	want = []string{
		"cmd/x links github.com/some/otel/exporter (cmd/x → github.com/some/otel/exporter): a package of a module it may not link; add the module to the binary's list after reading what it does",
		"cmd/x links internal/hub (cmd/x → gate → hub): not among the packages of this module it may link; add it to the binary's list after reading why it must",
	}
	if !slices.Equal(got, want) {
		t.Errorf("only:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A foreign package is refused from every importer but those its rule names.
	ext := map[string]pkg{
		m("cmd/y"):         {ImportPath: m("cmd/y"), Imports: []string{"ext/driver/conn", m("internal/hub")}},
		m("internal/hub"):  {ImportPath: m("internal/hub"), Imports: []string{"ext/driver/types", "ext/driver"}},
		"ext/driver":       {ImportPath: "ext/driver", Imports: []string{"ext/driver/conn", "ext/driver/types"}},
		"ext/driver/conn":  {ImportPath: "ext/driver/conn", Imports: []string{"ext/driver/types"}},
		"ext/driver/types": {ImportPath: "ext/driver/types"},
	}
	got = linkViolations(ext, binary{cmd: "cmd/y", foreign: map[string]foreignRule{
		"ext/driver":       {why: "the whole driver"},
		"ext/driver/types": {why: "the types", via: []string{"ext/driver/conn"}},
	}})
	want = []string{
		"cmd/y links ext/driver (cmd/y → hub → ext/driver): the whole driver",
		"cmd/y links ext/driver/types (cmd/y → hub → ext/driver → ext/driver/types): the types",
		"cmd/y links ext/driver/types (cmd/y → hub → ext/driver/types): the types",
	}
	if !slices.Equal(got, want) {
		t.Errorf("foreign:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = linkViolations(pkgs, binary{cmd: "cmd/x", requires: map[string]string{"internal/hubapi": "its contract", "internal/refusal": "its refusals"}})
	want = []string{"cmd/x does not link internal/refusal: its refusals"}
	if !slices.Equal(got, want) {
		t.Errorf("requires:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// unlinked are the modules no binary links (a path prefix each), with why.
var unlinked = map[string]string{
	"github.com/prometheus/": "the Prometheus client: internal/metrics serves the text format itself, and the client cost " +
		"each process 1.5 to 2.4 MiB of RSS (bench/RESULTS.md, 2026-12-04)",
	"google.golang.org/protobuf": "protobuf and its reflection, which the Prometheus client brought in: the gate's OTLP " +
		"exporter writes the wire format itself (internal/tracing/wire.go)",
}

// TestNoMetricsClient holds every binary under cmd/ to linking none of the unlinked modules, on
// linux, darwin and windows. A failure names the binary, the package and the import path to it.
func TestNoMetricsClient(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		all := list(t, goos, []string{module + "cmd/..."})
		var cmds []string
		for path := range all {
			if rest, ok := strings.CutPrefix(path, module+"cmd/"); ok && !strings.Contains(rest, "/") {
				cmds = append(cmds, path)
			}
		}
		if len(cmds) < 5 {
			t.Fatalf("GOOS=%s: go list found the commands %v, want gate, signer, console, lox and lockhttp at least", goos, cmds)
		}
		slices.Sort(cmds)
		for _, c := range cmds {
			for _, v := range linkedModules(all, c, unlinked) {
				t.Errorf("GOOS=%s: %s", goos, v)
			}
		}
	}
}

// linkedModules walks what root imports, transitively, and returns, for each module in forbidden
// (by path prefix) it links, the shortest path to one of its packages and why it must not.
func linkedModules(pkgs map[string]pkg, root string, forbidden map[string]string) []string {
	reported := map[string]bool{}
	via := map[string]string{root: ""}
	queue := []string{root}
	var out []string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[p].Imports {
			if _, seen := via[imp]; seen {
				continue
			}
			via[imp] = p
			queue = append(queue, imp)
			for prefix, why := range forbidden {
				if strings.HasPrefix(imp, prefix) && !reported[prefix] {
					reported[prefix] = true
					out = append(out, short(root)+" links "+imp+" ("+linkChain(via, imp)+"): "+why)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestLinkedModules checks linkedModules on a made-up graph, so that TestNoMetricsClient cannot
// pass by a walk that finds nothing.
func TestLinkedModules(t *testing.T) {
	m := func(p string) string { return module + p }
	pkgs := map[string]pkg{
		m("cmd/x"):            {Imports: []string{"fmt", m("internal/metrics")}},
		m("internal/metrics"): {Imports: []string{"github.com/prometheus/client_golang/prometheus"}},
		"github.com/prometheus/client_golang/prometheus": {Imports: []string{"google.golang.org/protobuf/proto"}},
		"google.golang.org/protobuf/proto":               {},
		"fmt":                                            {Standard: true},
	}
	got := linkedModules(pkgs, m("cmd/x"), unlinked)
	want := []string{
		"cmd/x links github.com/prometheus/client_golang/prometheus (cmd/x → metrics → github.com/prometheus/client_golang/prometheus): " + unlinked["github.com/prometheus/"],
		"cmd/x links google.golang.org/protobuf/proto (cmd/x → metrics → github.com/prometheus/client_golang/prometheus → google.golang.org/protobuf/proto): " + unlinked["google.golang.org/protobuf"],
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// testOnlyMark opens go.mod's blocks of test-only modules: every require after it.
const testOnlyMark = "// Test-only modules"

// TestTestOnlyModules holds go.mod's test-only blocks to their comment: no binary links a module
// they require, on linux, darwin or windows.
func TestTestOnlyModules(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), testOnlyMark)
	if !ok {
		t.Fatalf("go.mod has no %q block", testOnlyMark)
	}
	testOnly := map[string]bool{}
	for _, line := range strings.Split(rest, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(line, "\t") && !strings.HasPrefix(f[0], "//") {
			testOnly[f[0]] = true
		}
	}
	if len(testOnly) == 0 {
		t.Fatal("go.mod's test-only blocks name no module")
	}
	var cmds []string
	for _, b := range binaries {
		cmds = append(cmds, module+b.cmd)
	}
	cmds = append(cmds, module+"cmd/lockhttp")
	for _, goos := range []string{"linux", "darwin", "windows"} {
		linked := map[string]string{} // module → one of its packages a binary links
		for path, p := range list(t, goos, cmds) {
			if p.Module != nil && testOnly[p.Module.Path] && (linked[p.Module.Path] == "" || path < linked[p.Module.Path]) {
				linked[p.Module.Path] = path
			}
		}
		for _, m := range slices.Sorted(maps.Keys(linked)) {
			t.Errorf("GOOS=%s: a binary links %s (%s), which go.mod lists as test-only", goos, m, linked[m])
		}
	}
}
