package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/explain"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/gatefiles"
	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const explainSynopsis = `usage: lockhttp explain [flags] METHOD URL [-H 'NAME: VALUE']... [-d BODY | --data-file FILE]
       lockhttp explain [flags] REQUEST_FILE|-
       lockhttp explain [flags] --batch FILE|-
`

const explainUsage = explainSynopsis + `
What the gate would decide for one request, and why: the decision as JSON on stdout (one line,
or indented with --pretty), the policy it was decided with on stderr.

  METHOD URL     an absolute http:// or https:// URL (https:// is decided as inside a decrypted
                 tunnel, http:// as a plain proxy request, which is how the gate decides plain
                 HTTP sent through a CONNECT too); CONNECT takes host:port. Host comes from the URL unless -H gives one;
                 -d and --data-file add a Content-Length (and no Content-Type: give it with -H).
                 Flags may come before or after METHOD URL, as with curl.
  REQUEST_FILE   a raw request: request line, headers, an empty line, the body; - reads stdin.
                 Bare LF line ends are read as CRLF. A CONNECT head followed by a request is
                 that request sent in the tunnel: inside TLS, or as plain HTTP with --cleartext.

The policy: --policy FILE, or --state DIR for the approved policy the console of lox run
--state DIR serves (the gate decides with it, whatever the file on disk now says); without
either, lox run's default state directory .lockfamily when it exists.

flags:
`

// The limits of what explain reads.
const (
	maxExplainPolicy = 4 << 20  // a policy file (the console's bound)
	maxConsoleState  = 16 << 20 // the console's state file (the console's bound)
	maxExplainInput  = 16 << 20 // a request or a body
)

// defaultStateDir is lox run's default --state.
const defaultStateDir = ".lockfamily"

// consoleStateFile is the console's state file in lox run's state directory: internal/stack
// starts the console with -state STATE/console-state.json.
const consoleStateFile = "console-state.json"

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

// explainArgs are explain's flags and positional arguments.
type explainArgs struct {
	batch                             string
	policy, state, container, secrets string
	resolve                           resolveFlag
	dns, noDecrypt, cleartext, pretty bool
	transparent                       bool
	headers                           listFlag
	data                              string
	hasData                           bool // -d was given (an empty -d is an empty body)
	dataFile                          string
	mcpPins                           string
	positional                        []string
}

func (a *explainArgs) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("lockhttp explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&a.policy, "policy", "", "decide with the policy `FILE`")
	fs.StringVar(&a.state, "state", "", "decide with the approved policy of the console of lox run's state `DIR` (or the console's -state file); default: "+defaultStateDir+" when it exists")
	fs.StringVar(&a.container, "container", "", "the container the request comes from (default: the policy's only one)")
	a.resolve = resolveFlag{}
	fs.Var(a.resolve, "resolve", "`HOST=IP`: answer for a name instead of DNS (repeatable)")
	fs.BoolVar(&a.dns, "dns", false, "resolve names that --resolve and [floor.hosts] do not give with this machine's DNS")
	fs.BoolVar(&a.noDecrypt, "no-decrypt", false, "decide as a gate without a signer: every CONNECT at the domain")
	fs.BoolVar(&a.cleartext, "cleartext", false, "with a REQUEST_FILE of a CONNECT and the request after it: that request is plain HTTP sent through the tunnel, not TLS")
	fs.BoolVar(&a.transparent, "transparent", false, "decide as the gate's transparent listener would (a client that ignores the proxy, on the port its Host names): a plain request by its Host (origin-form is its usual form), CONNECT host:port as a TLS connection naming host, an https:// URL as a request inside one")
	fs.StringVar(&a.secrets, "secrets", "", "the gate's secrets `FILE`, for the checks of injected credentials")
	fs.Var(&a.headers, "H", "with METHOD URL: a header line `'NAME: VALUE'` (repeatable, in order)")
	fs.Func("d", "with METHOD URL: the request `BODY`, sent as given", func(s string) error {
		a.data, a.hasData = s, true
		return nil
	})
	fs.BoolVar(&a.pretty, "pretty", false, "print the decision indented over several lines, for a person to read (not with --batch)")
	fs.StringVar(&a.batch, "batch", "", "decide every request of `FILE` (- for stdin): one JSON object a line, {\"request\": base64 of the raw request}; one decision a line on stdout")
	fs.StringVar(&a.mcpPins, "mcp-pins", "", "decide MCP calls with the gate's pins of the servers' tools, its `FILE` mcp-pins.json in its audit directory (default: none seen, no tool changed)")
	fs.StringVar(&a.dataFile, "data-file", "", "with METHOD URL: the request body from `FILE` (- for stdin)")
	fs.Usage = func() {
		fmt.Fprint(stderr, explainUsage)
		fs.PrintDefaults()
	}
	return fs
}

// parseInterleaved parses args with fs, letting flags come after positional arguments as well
// as before them (curl's order: METHOD URL -H ...); Go's flag package alone stops at the first
// positional argument. After "--" every argument is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if endedByDashes(fs, args, rest) {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// endedByDashes reports whether fs stopped parsing args at a "--" (and not at a "--" that was
// the value of the flag before it).
func endedByDashes(fs *flag.FlagSet, args, rest []string) bool {
	i := len(args) - len(rest)
	if i == 0 || args[i-1] != "--" {
		return false
	}
	return i < 2 || !takesValue(fs, args[i-2])
}

// takesValue reports whether arg is a flag of fs written without "=" that takes the next
// argument as its value.
func takesValue(fs *flag.FlagSet, arg string) bool {
	if !strings.HasPrefix(arg, "-") || strings.Contains(arg, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"))
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

func runExplain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var a explainArgs
	fs := a.flagSet(stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package said why, with the usage
	}
	a.positional = pos
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "lockhttp explain: %v\n%s", err, explainSynopsis)
		return 2
	}
	var raw []byte
	fromFile := len(pos) == 1
	switch {
	case a.batch != "":
		if len(pos) > 0 || len(a.headers) > 0 || a.hasData || a.dataFile != "" {
			return usageErr(errors.New("--batch reads every request from its file; give no request besides"))
		}
		if a.pretty {
			return usageErr(errors.New("--batch prints one decision a line; --pretty goes with one request"))
		}
	case len(pos) == 2:
		if raw, err = a.buildRequest(stdin); err != nil {
			return usageErr(err)
		}
	case fromFile:
		if len(a.headers) > 0 || a.hasData || a.dataFile != "" {
			return usageErr(errors.New("-H, -d and --data-file go with METHOD URL; a request file holds its own headers and body"))
		}
	default:
		return usageErr(fmt.Errorf("give METHOD URL or a request file (%d arguments given)", len(pos)))
	}
	pol, used, err := loadExplainPolicy(a.policy, a.state)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return usageErr(err)
		}
		fmt.Fprintln(stderr, "lockhttp explain:", err)
		return 2
	}
	fmt.Fprintln(stderr, "lockhttp explain: "+used)
	if a.batch != "" {
		return a.runBatch(pol, stdin, stdout, stderr)
	}
	if fromFile {
		if raw, err = readRequestFile(pos[0], stdin); err != nil {
			fmt.Fprintln(stderr, "lockhttp explain:", err)
			return 2
		}
		if err := checkHost(raw); err != nil {
			fmt.Fprintln(stderr, "lockhttp explain:", err)
			return 2
		}
	}
	res, err := explain.Request(context.Background(), raw, a.options(pol, stderr))
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp explain:", err)
		return 2
	}
	enc := json.NewEncoder(stdout) // each value ends with a newline
	enc.SetEscapeHTML(false)
	if a.pretty {
		enc.SetIndent("", "  ")
	}
	enc.Encode(res)
	return 0
}

// usageError is a mistake in how explain was called, answered with the synopsis.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// readRequestFile reads the request file name ("-": stdin), bounded.
func readRequestFile(name string, stdin io.Reader) ([]byte, error) {
	in := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && strings.Contains(name, "://") {
				return nil, fmt.Errorf("no request file %q; for a URL give the method too: lockhttp explain GET %s", name, name)
			}
			return nil, err
		}
		defer f.Close()
		in = f
	}
	raw, err := io.ReadAll(io.LimitReader(in, maxExplainInput))
	if err != nil {
		return nil, fmt.Errorf("reading the request: %w", err)
	}
	return raw, nil
}

// checkHost refuses a request file that names no host: without a Host header, an origin-form
// target (GET /path), or any HTTP/1.1 request but a CONNECT. The gate would refuse such a request
// too, but the file is what is wrong, so this is a usage error naming the fix. A request line
// that does not read as METHOD TARGET HTTP/1.x is left to explain, which answers it as the gate's
// framing check does.
func checkHost(raw []byte) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return errors.New("the request is empty; write a request line (GET http://example.org/path HTTP/1.1) and a Host line, or give METHOD URL instead of a file")
	}
	line, rest := nextLine(raw)
	parts := strings.Split(string(line), " ")
	if len(parts) != 3 || parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0" {
		return nil
	}
	method, target, proto := parts[0], parts[1], parts[2]
	if method == "CONNECT" {
		return nil // the target is the host; a CONNECT needs no Host header
	}
	for len(rest) > 0 {
		line, rest = nextLine(rest)
		if len(line) == 0 {
			break
		}
		if name, _, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(strings.TrimSpace(string(name)), "host") {
			return nil
		}
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || !strings.Contains(target, "://") {
		return fmt.Errorf("the request names no host: its target %q is not a URL and it has no Host header; write the URL in the request line and add a Host line (GET http://example.org/path HTTP/1.1, then Host: example.org), or give METHOD URL instead of a file", target)
	}
	if proto == "HTTP/1.1" {
		return fmt.Errorf("the request has no Host header, which HTTP/1.1 requires (the gate answers 400 without one); add the line %q after the request line, or give METHOD URL instead of a file", "Host: "+u.Host)
	}
	return nil
}

// nextLine splits b after its first line, which it returns without its LF or CRLF.
func nextLine(b []byte) (line, rest []byte) {
	line, rest, _ = bytes.Cut(b, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), rest
}

// buildRequest writes the raw request of METHOD URL with the -H headers and the body, as curl
// would send it to a proxy: METHOD absolute-URL HTTP/1.1 (CONNECT host:port HTTP/1.1), Host
// from the URL unless a -H gives one, the -H headers in order, Content-Length for a body.
func (a *explainArgs) buildRequest(stdin io.Reader) ([]byte, error) {
	method, target := a.positional[0], a.positional[1]
	if err := checkMethod(method); err != nil {
		return nil, err
	}
	var host string
	var err error
	if method == "CONNECT" {
		host, err = connectTarget(target)
	} else {
		target, host, err = absoluteTarget(target)
	}
	if err != nil {
		return nil, err
	}
	var lines []string
	var hasHost, hasFraming bool
	for _, h := range a.headers {
		l, err := headerLine(h)
		if err != nil {
			return nil, err
		}
		name, _, _ := strings.Cut(l, ":")
		hasHost = hasHost || strings.EqualFold(name, "Host")
		hasFraming = hasFraming || strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding")
		lines = append(lines, l)
	}
	body, hasBody, err := a.body(stdin)
	if err != nil {
		return nil, err
	}
	if hasBody && method == "CONNECT" {
		return nil, errors.New("a CONNECT has no body; drop -d and --data-file")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	if !hasHost {
		fmt.Fprintf(&b, "Host: %s\r\n", host)
	}
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	if hasBody && !hasFraming {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes(), nil
}

// body is the -d or --data-file body, and whether one was given.
func (a *explainArgs) body(stdin io.Reader) ([]byte, bool, error) {
	switch {
	case a.hasData && a.dataFile != "":
		return nil, false, errors.New("give the body with -d or with --data-file, not both")
	case a.hasData:
		return []byte(a.data), true, nil
	case a.dataFile == "":
		return nil, false, nil
	}
	in := stdin
	if a.dataFile != "-" {
		f, err := os.Open(a.dataFile)
		if err != nil {
			return nil, false, fmt.Errorf("--data-file: %w", err)
		}
		defer f.Close()
		in = f
	}
	data, err := io.ReadAll(io.LimitReader(in, maxExplainInput+1))
	if err != nil {
		return nil, false, fmt.Errorf("--data-file %s: %w", a.dataFile, err)
	}
	if len(data) > maxExplainInput {
		return nil, false, fmt.Errorf("--data-file %s: larger than %d bytes, more than explain reads", a.dataFile, maxExplainInput)
	}
	return data, true, nil
}

// checkMethod accepts an HTTP method as the policy names them: an upper-case token.
func checkMethod(m string) error {
	if m == "" || strings.IndexFunc(m, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return fmt.Errorf("%q is not an HTTP method; write METHOD URL, like GET https://example.org/", m)
	}
	if up := strings.ToUpper(m); up != m {
		return fmt.Errorf("method %q: methods are upper case; write %s", m, up)
	}
	return nil
}

func isTokenChar(r rune) bool {
	return r < 0x7f && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// absoluteTarget checks an absolute http(s) URL and returns the request target (the URL as
// written, without its fragment, with "/" for an empty path) and the Host header value.
func absoluteTarget(s string) (target, host string, err error) {
	const how = "write an absolute http:// or https:// URL, like https://example.org/path (CONNECT takes host:port)"
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return "", "", fmt.Errorf("the URL %q has a space, a control or a non-ASCII character; escape it (%%20, %%XX) and write an international host name in punycode (xn--...)", s)
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", "", fmt.Errorf("the URL %q does not parse (%v); %s", s, err, how)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "" {
		return "", "", fmt.Errorf("%q is not an absolute http(s) URL; %s", s, how)
	}
	s, _, _ = strings.Cut(s, "#") // the fragment is never sent
	rest := s[len(u.Scheme)+len("://"):]
	if end := strings.IndexAny(rest, "/?"); end < 0 {
		rest += "/"
	} else if rest[end] == '?' {
		rest = rest[:end] + "/" + rest[end:]
	}
	return u.Scheme + "://" + rest, u.Host, nil
}

// connectTarget checks a CONNECT target, host:port, and returns it as the Host header value.
func connectTarget(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(port)
	if err != nil || host == "" || strings.ContainsAny(s, "/?#@") || perr != nil || n < 1 || n > 65535 || strings.Trim(port, "0123456789") != "" {
		return "", fmt.Errorf("the CONNECT target %q is not host:port; write it like CONNECT example.org:443", s)
	}
	return s, nil
}

// headerLine checks one -H value and returns it as a header line "Name: value".
func headerLine(h string) (string, error) {
	if strings.ContainsAny(h, "\r\n") {
		return "", fmt.Errorf("the header %q has a line break; give each header with its own -H", h)
	}
	name, value, ok := strings.Cut(h, ":")
	if !ok {
		return "", fmt.Errorf("the header %q has no ':'; write it as -H 'Name: value'", h)
	}
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return "", fmt.Errorf("the header %q: %q is not a header name; write it as -H 'Name: value'", h, name)
	}
	return name + ": " + strings.Trim(value, " \t"), nil
}

// loadExplainPolicy loads the policy explain decides with: the file policyPath, or the approved
// policy in the console's state of the state directory (lox run --state), or of lox run's
// default state directory when neither is given. used says which, for stderr.
func loadExplainPolicy(policyPath, state string) (pol *policy.Policy, used string, err error) {
	switch {
	case policyPath != "" && state != "":
		return nil, "", &usageError{"give --policy FILE or --state DIR, not both: --state decides with the console's approved policy, --policy with a file"}
	case policyPath != "":
		data, err := atomicfile.ReadFile(policyPath, maxExplainPolicy)
		if err != nil {
			return nil, "", fmt.Errorf("policy: %w", err)
		}
		pol, err := policy.Load(policyPath, data)
		if err != nil {
			return nil, "", err
		}
		return pol, fmt.Sprintf("policy %s, the file %s", shortVersion(pol.Version), policyPath), nil
	case state != "":
		return approvedPolicy(state)
	}
	if fi, err := os.Stat(defaultStateDir); err == nil && fi.IsDir() {
		return approvedPolicy(defaultStateDir)
	}
	return nil, "", &usageError{"give --policy FILE or --state DIR (lox run's state directory); there is no " + defaultStateDir + " here"}
}

// approvedPolicy loads the approved policy from the console's state file: state is lox run's
// state directory (its console-state.json) or the console's -state file itself.
func approvedPolicy(state string) (*policy.Policy, string, error) {
	fi, err := os.Stat(state)
	if err != nil {
		return nil, "", &usageError{fmt.Sprintf("--state %s: %v; give lox run's state directory", state, errors.Unwrap(err))}
	}
	path := state
	if fi.IsDir() {
		path = filepath.Join(state, consoleStateFile)
	}
	data, err := atomicfile.ReadFile(path, maxConsoleState)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", &usageError{fmt.Sprintf("no approved policy in %s: it has no %s, so no console has run with it (lox run --state %s); give --policy FILE or --state DIR (lox run's state directory)", state, consoleStateFile, state)}
	}
	if err != nil {
		return nil, "", fmt.Errorf("console state: %w", err)
	}
	// The console's state file (internal/console): its format version, the approved policy and the
	// bound credentials.
	var st struct {
		Version  int               `json:"version"`
		Approved *console.Approved `json:"approved"`
		Bound    []console.Binding `json:"bound"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, "", fmt.Errorf("console state %s: %w; is it the console's -state file?", path, err)
	}
	if st.Version != 1 {
		return nil, "", fmt.Errorf("console state %s: format version %d, this lockhttp reads 1; use the lockhttp the console was built with", path, st.Version)
	}
	a := st.Approved
	if a == nil {
		return nil, "", fmt.Errorf("console state %s holds no approved policy yet; give --policy FILE", path)
	}
	pol, err := policy.Load(a.Name, []byte(a.TOML))
	if err != nil {
		return nil, "", fmt.Errorf("console state %s: the approved policy does not load with this lockhttp: %w", path, err)
	}
	if pol.Version != a.Version {
		return nil, "", fmt.Errorf("console state %s: the approved policy's text does not match its version %s; the file was edited by hand", path, a.Version)
	}
	// The Claude credentials humans bound to containers: the console serves them with the policy.
	if pol.ClaudeBound, err = console.BoundByContainer(st.Bound); err != nil {
		return nil, "", fmt.Errorf("console state %s: %w; the file was edited by hand", path, err)
	}
	used := fmt.Sprintf("policy %s, the approved policy of the console at %s", shortVersion(pol.Version), state)
	if onDisk, err := atomicfile.ReadFile(a.Name, maxExplainPolicy); err == nil && policy.Hash(onDisk) != a.Version {
		used += fmt.Sprintf(" (the file %s differs from it; the gate does not decide with the file)", a.Name)
	}
	return pol, used, nil
}

// shortVersion is a policy version as lox and the console show it: sha256: and 12 hex digits.
func shortVersion(v string) string {
	if len(v) > 19 {
		return v[:19]
	}
	return v
}

// options are explain's inputs besides the request.
func (a *explainArgs) options(pol *policy.Policy, stderr io.Writer) explain.Options {
	insp, problems := gatefiles.Checks(pol, a.secrets)
	for _, p := range problems {
		fmt.Fprintln(stderr, "lockhttp explain: note:", p)
	}
	o := explain.Options{Policy: pol, Container: a.container, Resolve: a.resolve, NoDecrypt: a.noDecrypt, Cleartext: a.cleartext, Transparent: a.transparent, Checks: insp}
	if a.dns {
		o.Resolver = net.DefaultResolver
	}
	if a.mcpPins != "" {
		pins := mcp.Pins{}
		data, err := atomicfile.ReadFile(a.mcpPins, maxExplainPins)
		if err == nil {
			err = json.Unmarshal(data, &pins)
		}
		if err != nil {
			fmt.Fprintf(stderr, "lockhttp explain: note: --mcp-pins %s does not load (%v): decided as a gate that saw no tool change\n", a.mcpPins, err)
		} else {
			o.Pins = pins
		}
	}
	return o
}

// maxExplainPins bounds the gate's file of MCP tool pins that --mcp-pins reads.
const maxExplainPins = 64 << 20

// batchLine is one request of a --batch file.
type batchLine struct {
	Request []byte `json:"request"` // the raw request, base64 in the file
}

// maxBatchLine bounds one line of a --batch file.
const maxBatchLine = 32 << 20

// runBatch decides every request of the --batch file, one JSON line out for each line in: the
// decision, or {"error": "..."} for a line that is not a request.
func (a *explainArgs) runBatch(pol *policy.Policy, stdin io.Reader, stdout, stderr io.Writer) int {
	in := stdin
	if a.batch != "-" {
		f, err := os.Open(a.batch)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp explain:", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	o := a.options(pol, stderr)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxBatchLine)
	bw := bufio.NewWriter(stdout)
	defer bw.Flush()
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for n := 1; sc.Scan(); n++ {
		var l batchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			enc.Encode(map[string]string{"error": fmt.Sprintf("line %d: %v; write {\"request\": \"<base64 of the raw request>\"}", n, err)})
			continue
		}
		res, err := explain.Request(context.Background(), l.Request, o)
		if err != nil {
			enc.Encode(map[string]string{"error": fmt.Sprintf("line %d: %v", n, err)})
			continue
		}
		enc.Encode(res)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(stderr, "lockhttp explain: reading the batch:", err)
		return 2
	}
	return 0
}
