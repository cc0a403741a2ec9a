// Package explaintest reads the decide corpus, for tests only: txtar files that each hold a
// policy, one raw request, the environment it is decided in and the decision expected
// (internal/explain/testdata/decide/README.md describes the format).
package explaintest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/rogpeppe/go-internal/txtar"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/explain"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/gatefiles"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// The sections a case file may hold besides the files written to its work directory.
const (
	SectionPolicy  = "policy.toml"  // the policy; required
	SectionRequest = "request"      // the raw request; required
	SectionEnv     = "env"          // the environment: one setting a line
	SectionWant    = "want"         // the decision expected; required
	SectionSecrets = "secrets.toml" // the gate's secrets file (lockhttp explain --secrets)
)

// Case is one file of the corpus, as written: placeholders are expanded by Prepare.
type Case struct {
	// Name is the file's name without .txtar; File its path.
	Name, File string
	// Comment is the text before the first section: what the case shows.
	Comment string
	Policy  string
	Request string
	Env     Env
	// Files are the other sections, written to the work directory (mode 0600) before the
	// policy is loaded: the secrets file, a Claude credentials file.
	Files map[string]string
	Want  Want
}

// Env is what the request is decided in besides the policy.
type Env struct {
	// Container is the container the request comes from (--container); empty: the policy's
	// only one.
	Container string
	// Cleartext reads the request after a CONNECT head as plain HTTP sent through the tunnel.
	Cleartext bool
	// NoDecrypt decides as a gate without a signer.
	NoDecrypt bool
	// Resolve are explain's --resolve answers, HOST=IP as written.
	Resolve []string
	// Bind are the Claude credentials the console has bound to containers (what a human's
	// approval of a new credential made), as "CONTAINER HASH" with placeholders.
	Bind []string
	// NoReplay says why the gate replay cannot put the gate in this case's environment; empty:
	// the case is replayed.
	NoReplay string
}

// Want is the decision expected.
type Want struct {
	Verdict, Code, Rule string
	// Kind, when set, is explain's "kind" (plain, tunnel, connect-decrypted, ...).
	Kind string
	// Reason is the public reason, exactly; or ReasonRE, a pattern it must match whole.
	Reason   string
	ReasonRE *regexp.Regexp
	// Fingerprint, when set, is the MCP call's fingerprint a ticket is keyed by (explain's
	// mcp.fingerprint), or "-" for none.
	Fingerprint string
}

// Load reads every *.txtar file of dir, sorted by name.
func Load(dir string) ([]*Case, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s holds no .txtar case", dir)
	}
	sort.Strings(names)
	var out []*Case
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		c, err := Parse(name, data)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Parse reads one case file; errors name the file and, where there is one, the line.
func Parse(file string, data []byte) (*Case, error) {
	a := txtar.Parse(data)
	c := &Case{Name: strings.TrimSuffix(filepath.Base(file), ".txtar"), File: file, Comment: string(a.Comment), Files: map[string]string{}}
	seen := map[string]bool{}
	for _, f := range a.Files {
		if seen[f.Name] {
			return nil, fmt.Errorf("%s: the section %q is given twice", file, f.Name)
		}
		seen[f.Name] = true
		text := string(f.Data)
		switch f.Name {
		case SectionPolicy:
			c.Policy = text
		case SectionRequest:
			c.Request = text
		case SectionEnv:
			if err := c.parseEnv(text); err != nil {
				return nil, err
			}
		case SectionWant:
			if err := c.parseWant(text); err != nil {
				return nil, err
			}
		default:
			if strings.ContainsAny(f.Name, `/\`) || f.Name == "." || f.Name == ".." {
				return nil, fmt.Errorf("%s: the section %q names a file outside the work directory; give a plain file name", file, f.Name)
			}
			c.Files[f.Name] = text
		}
	}
	for _, s := range []string{SectionPolicy, SectionRequest, SectionWant} {
		if !seen[s] {
			return nil, fmt.Errorf("%s: no -- %s -- section; a case holds %s, %s and %s", file, s, SectionPolicy, SectionRequest, SectionWant)
		}
	}
	return c, nil
}

// sectionLines yields the lines of a section that are neither empty nor comments, with their
// line numbers in the section.
func sectionLines(text string, f func(n int, line string) error) error {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := f(n, line); err != nil {
			return err
		}
	}
	return sc.Err()
}

func (c *Case) parseEnv(text string) error {
	return sectionLines(text, func(n int, line string) error {
		key, val, _ := strings.Cut(line, " ")
		val = strings.TrimSpace(val)
		at := fmt.Sprintf("%s: -- env -- line %d", c.File, n)
		switch key {
		case "container":
			c.Env.Container = val
		case "cleartext":
			c.Env.Cleartext = true
		case "no-decrypt":
			c.Env.NoDecrypt = true
		case "resolve":
			c.Env.Resolve = append(c.Env.Resolve, val)
		case "bind":
			c.Env.Bind = append(c.Env.Bind, val)
		case "no-replay":
			if val == "" {
				return fmt.Errorf("%s: no-replay needs the reason the gate cannot be put in this environment", at)
			}
			c.Env.NoReplay = val
		default:
			return fmt.Errorf("%s: unknown setting %q; use container, cleartext, no-decrypt, resolve, bind or no-replay", at, key)
		}
		if (key == "cleartext" || key == "no-decrypt") && val != "" {
			return fmt.Errorf("%s: %s takes no value", at, key)
		}
		if (key == "container" || key == "resolve" || key == "bind") && val == "" {
			return fmt.Errorf("%s: %s needs a value", at, key)
		}
		return nil
	})
}

func (c *Case) parseWant(text string) error {
	err := sectionLines(text, func(n int, line string) error {
		key, val, _ := strings.Cut(line, " ")
		at := fmt.Sprintf("%s: -- want -- line %d", c.File, n)
		switch key {
		case "verdict":
			c.Want.Verdict = val
		case "code":
			c.Want.Code = val
		case "rule":
			c.Want.Rule = val
		case "kind":
			c.Want.Kind = val
		case "fingerprint":
			c.Want.Fingerprint = val
		case "reason":
			if re, ok := strings.CutPrefix(val, "~ "); ok {
				r, err := regexp.Compile("^(?:" + re + ")$")
				if err != nil {
					return fmt.Errorf("%s: the reason's pattern: %v", at, err)
				}
				c.Want.ReasonRE = r
			} else {
				c.Want.Reason = val
			}
		default:
			return fmt.Errorf("%s: unknown key %q; use verdict, code, rule, kind, reason and fingerprint", at, key)
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case c.Want.Verdict != "FREE" && c.Want.Verdict != "ASK" && c.Want.Verdict != "DENY":
		return fmt.Errorf("%s: -- want -- needs a verdict line: verdict FREE, ASK or DENY", c.File)
	case c.Want.Rule == "":
		return fmt.Errorf("%s: -- want -- needs a rule line", c.File)
	case c.Want.Verdict == "DENY" && c.Want.Code == "":
		return fmt.Errorf("%s: a DENY needs its code line (code E_...)", c.File)
	case c.Want.Verdict != "DENY" && c.Want.Code != "":
		return fmt.Errorf("%s: only a DENY has a code", c.File)
	case c.Want.Reason == "" && c.Want.ReasonRE == nil:
		return fmt.Errorf("%s: -- want -- needs a reason line: the reason exactly, or reason ~ REGEXP", c.File)
	}
	return nil
}

// Prepared is a case made ready in a work directory: the request's bytes and explain's options.
type Prepared struct {
	// Work is the work directory; Policy the policy text with its placeholders expanded.
	Work   string
	Policy string
	// Raw is the request as lockhttp explain reads a request file.
	Raw     []byte
	Options explain.Options
	// Secrets is the secrets file's path, or "".
	Secrets string
	// Bound maps a container to the Claude credential hashes the console has bound to it.
	Bound map[string][]string
	// Resolve maps a host to the address --resolve gives it.
	Resolve map[string]netip.Addr
}

// Prepare writes the case's files into work, loads its policy as lockhttp explain --policy
// does, and builds the options lockhttp explain builds from its flags.
func (c *Case) Prepare(work string) (*Prepared, error) {
	ex := &expander{work: work}
	p := &Prepared{Work: work}
	names := make([]string, 0, len(c.Files))
	for name := range c.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		data, err := ex.expand(c.Files[name])
		if err != nil {
			return nil, fmt.Errorf("%s: -- %s --: %w", c.File, name, err)
		}
		if err := os.WriteFile(filepath.Join(work, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	text, err := ex.expand(c.Policy)
	if err != nil {
		return nil, fmt.Errorf("%s: -- %s --: %w", c.File, SectionPolicy, err)
	}
	p.Policy = string(text)
	polPath := filepath.Join(work, SectionPolicy)
	if err := os.WriteFile(polPath, text, 0o600); err != nil {
		return nil, err
	}
	pol, err := policy.Load(polPath, text)
	if err != nil {
		return nil, fmt.Errorf("%s: the policy does not load: %w", c.File, err)
	}
	for _, b := range c.Env.Bind {
		v, err := ex.expand(b)
		if err != nil {
			return nil, fmt.Errorf("%s: -- env -- bind: %w", c.File, err)
		}
		container, hash, ok := strings.Cut(string(v), " ")
		if !ok || !claudeapi.IsHash(hash) {
			return nil, fmt.Errorf("%s: -- env -- bind %q: write bind CONTAINER HASH, the hash 64 lower-case hex digits (${sha256 ...})", c.File, b)
		}
		if p.Bound == nil {
			p.Bound = map[string][]string{}
		}
		p.Bound[container] = append(p.Bound[container], hash)
	}
	pol.ClaudeBound = p.Bound
	if _, ok := c.Files[SectionSecrets]; ok {
		p.Secrets = filepath.Join(work, SectionSecrets)
	}
	checks, _ := gatefiles.Checks(pol, p.Secrets)
	o := explain.Options{Policy: pol, Container: c.Env.Container, Cleartext: c.Env.Cleartext, NoDecrypt: c.Env.NoDecrypt, Checks: checks}
	for _, r := range c.Env.Resolve {
		host, addr, ok := strings.Cut(r, "=")
		name, ref := floor.Host(host)
		a, err := netip.ParseAddr(addr)
		if !ok || ref != nil || err != nil {
			return nil, fmt.Errorf("%s: -- env -- resolve %q: write resolve HOST=IP", c.File, r)
		}
		if o.Resolve == nil {
			o.Resolve, p.Resolve = map[string][]netip.Addr{}, map[string]netip.Addr{}
		}
		o.Resolve[name] = append(o.Resolve[name], a)
		p.Resolve[name] = a
	}
	p.Options = o
	if p.Raw, err = c.raw(ex); err != nil {
		return nil, fmt.Errorf("%s: -- %s --: %w", c.File, SectionRequest, err)
	}
	return p, nil
}

// raw builds the request's bytes from its section: each head's lines end in CRLF, the body is
// what follows the blank line less the section's last newline, and a body gets a Content-Length
// unless its head frames it. A CONNECT head followed by more is the CONNECT and the request sent
// inside its tunnel. Placeholders are expanded after the line ends are set, so ${LF} and ${CR}
// write bare ones.
func (c *Case) raw(ex *expander) ([]byte, error) {
	text := strings.TrimSuffix(c.Request, "\n")
	head, rest, _ := strings.Cut(text, "\n\n")
	var out []byte
	if strings.HasPrefix(head, "CONNECT ") && strings.TrimSpace(rest) != "" {
		h, err := ex.expand(strings.ReplaceAll(head, "\n", "\r\n") + "\r\n\r\n")
		if err != nil {
			return nil, err
		}
		out = h
		head, rest, _ = strings.Cut(rest, "\n\n")
	}
	h, err := ex.expand(strings.ReplaceAll(head, "\n", "\r\n") + "\r\n")
	if err != nil {
		return nil, err
	}
	body, err := ex.expand(rest)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 && !frames(h) {
		h = fmt.Appendf(h, "Content-Length: %d\r\n", len(body))
	}
	out = append(append(append(out, h...), "\r\n"...), body...)
	return out, nil
}

// frames reports whether a head has a Content-Length or Transfer-Encoding line.
func frames(head []byte) bool {
	for _, l := range bytes.Split(head, []byte("\n")) {
		name, _, ok := bytes.Cut(l, []byte(":"))
		n := strings.ToLower(strings.TrimSpace(string(name)))
		if ok && (n == "content-length" || n == "transfer-encoding") {
			return true
		}
	}
	return false
}

// Check compares a decision, and explain's kind, with the case's Want; the error says what
// differs.
func (w Want) Check(d policy.Decision, kind string) error {
	var diffs []string
	if got := d.Verdict.String(); got != w.Verdict {
		diffs = append(diffs, fmt.Sprintf("verdict %s, want %s", got, w.Verdict))
	}
	if got := string(d.Code); got != w.Code {
		diffs = append(diffs, fmt.Sprintf("code %q, want %q", got, w.Code))
	}
	if d.Rule != w.Rule {
		diffs = append(diffs, fmt.Sprintf("rule %q, want %q", d.Rule, w.Rule))
	}
	if w.Kind != "" && kind != w.Kind {
		diffs = append(diffs, fmt.Sprintf("kind %q, want %q", kind, w.Kind))
	}
	switch {
	case w.ReasonRE != nil && !w.ReasonRE.MatchString(d.Reason):
		diffs = append(diffs, fmt.Sprintf("reason %q does not match ~ %s", d.Reason, w.ReasonRE))
	case w.ReasonRE == nil && d.Reason != w.Reason:
		diffs = append(diffs, fmt.Sprintf("reason\n\t%s\nwant\n\t%s", d.Reason, w.Reason))
	}
	if len(diffs) == 0 {
		return nil
	}
	return errors.New(strings.Join(diffs, "; "))
}

// CheckFingerprint compares explain's MCP fingerprint (empty: none) with the case's, when it
// names one.
func (w Want) CheckFingerprint(fp string) error {
	want := w.Fingerprint
	if want == "-" {
		want = ""
	}
	if w.Fingerprint == "" || fp == want {
		return nil
	}
	return fmt.Errorf("fingerprint %q, want %q", fp, w.Fingerprint)
}
