package doctor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/gatefiles"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// Setup says where a stack's parts are, as seen from where the doctor runs. An empty field skips
// its check.
type Setup struct {
	CACert    string // the ca.pem agents trust
	CAKey     string // the CA key file (only its mode and owner are read, never its contents)
	SignerUID int    // the uid the key must belong to; -1 unknown

	SignerSocket  string
	ConsoleSocket string
	GateSocket    string
	Hub           string // the hub's URL
	HubToken      string // a facade token file
	// Proxy is the gate's proxy URL for the self requests (http://lockhttp.internal/ and, with
	// ProxyCA, https://lockhttp.internal/).
	Proxy   string
	ProxyCA string
	// AuditDir is the gate's audit directory; AuditID a request id to find in it ("": the id of
	// the self request).
	AuditDir string
	AuditID  string
	// ProbeOther probes the signer with another uid; nil: not probed, and NotProbed says why
	// (NotProbedOK: the reason is itself a proof).
	ProbeOther  func(ctx context.Context) (uid int, refused bool, how string, err error)
	NotProbed   string
	NotProbedOK bool
	// VersionWait is how long to wait for the gate to take the console's policy (it polls
	// every 2 s). Zero: 6 s.
	VersionWait time.Duration
	// SecretsFile is the gate's secrets file ("": not checked).
	SecretsFile string
	// Metrics maps a process to its metrics URL (up.json's "metrics"). Empty: none scraped.
	Metrics map[string]string
}

// Gather collects the facts of s.
func Gather(ctx context.Context, s Setup, f *Facts) {
	if f.Now.IsZero() {
		f.Now = time.Now()
	}
	if s.CACert != "" {
		f.CA = gatherCA(s)
	}
	if s.ConsoleSocket != "" {
		f.Console = gatherConsole(ctx, s.ConsoleSocket)
	}
	if s.GateSocket != "" {
		want := ""
		if f.Console != nil && f.Console.Status != nil {
			want = f.Console.Status.Version
		}
		f.Gate = gatherGate(ctx, s.GateSocket, want, s.VersionWait)
	}
	if s.SignerSocket != "" {
		f.Signer = gatherSigner(ctx, s)
	}
	if s.Hub != "" {
		f.Hub = gatherHub(ctx, s.Hub, s.HubToken)
		if f.Console != nil && f.Console.Status != nil {
			f.Hub.PhoneURL = f.Console.Status.Phone
		}
	}
	if len(s.Metrics) > 0 {
		f.Metrics = gatherMetrics(ctx, s.Metrics)
	}
	if s.Proxy != "" {
		f.Self = SelfRequests(ctx, s.Proxy, s.ProxyCA)
	}
	if s.SecretsFile != "" {
		f.Secrets = gatherSecrets(s.SecretsFile)
	}
	if s.AuditDir != "" {
		id := s.AuditID
		if id == "" && f.Self != nil && f.Self.Plain != nil {
			id = f.Self.Plain.Request
		}
		if id != "" {
			f.Audit = FindAudit(ctx, s.AuditDir, id)
		}
	}
}

func gatherCA(s Setup) *CAFacts {
	ca := &CAFacts{CertPath: s.CACert, KeyPath: s.CAKey, SignerUID: s.SignerUID}
	if c, err := readCert(s.CACert); err != nil {
		ca.CertErr = err.Error()
	} else {
		sum := sha256.Sum256(c.Raw)
		ca.Subject, ca.NotAfter, ca.SHA256, ca.IsCA = c.Subject.String(), c.NotAfter, hex.EncodeToString(sum[:]), c.IsCA
	}
	if s.CAKey == "" {
		return ca
	}
	fi, err := os.Stat(s.CAKey)
	switch {
	case errors.Is(err, os.ErrPermission):
		// Not visible from here (the key's directory is the signer's alone): not a finding.
		return ca
	case err != nil:
		ca.KeyStat, ca.KeyErr = true, err.Error()
	default:
		ca.KeyStat, ca.KeyMode = true, uint32(fi.Mode())
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ca.KeyUID = int(st.Uid)
		}
	}
	return ca
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block in the file")
	}
	return x509.ParseCertificate(b.Bytes)
}

// getJSON GETs path on a unix socket and decodes the JSON answer.
func getJSON(ctx context.Context, socket, path string, out any) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://unix"+path, nil)
	resp, err := unixsock.Client(socket, 5*time.Second).Do(req)
	if err != nil {
		return unwrapURL(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s answered %d: %s", path, resp.StatusCode, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// unwrapURL drops net/http's "Get \"http://unix/...\":" prefix, which names no real URL.
func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

func gatherConsole(ctx context.Context, socket string) *ConsoleFacts {
	c := &ConsoleFacts{Socket: socket}
	var st console.Status
	if err := getJSON(ctx, socket, "/status", &st); err != nil {
		c.Err = err.Error()
		return c
	}
	c.Status = &st
	if st.Version == "" {
		return c
	}
	var served console.Served
	if err := getJSON(ctx, socket, "/policy", &served); err != nil {
		c.PolicyErr = err.Error()
		return c
	}
	p, err := policy.Load("(served by the console)", []byte(served.TOML))
	if err != nil {
		c.PolicyErr = err.Error()
		return c
	}
	name := served.Name
	if name == "" {
		name = "the policy"
	}
	c.Policy = fmt.Sprintf("%s, version %s, %d rules", name, short(served.Version), served.Rules)
	for _, pr := range p.Floor.AllowCIDRs {
		c.AllowCIDRs = append(c.AllowCIDRs, pr.String())
	}
	for _, port := range p.Floor.AllowPorts {
		if port != 80 && port != 443 {
			c.AllowPorts = append(c.AllowPorts, port)
		}
	}
	if len(p.Floor.Hosts) > 0 {
		c.FloorHosts = map[string]string{}
		for h, a := range p.Floor.Hosts {
			c.FloorHosts[h] = a.String()
		}
	}
	c.Heuristics = p.Settings.Heuristics
	for _, in := range p.Injections() {
		c.Injects = append(c.Injects, InjectRule{Name: in.Name, Hosts: in.Hosts, Secret: in.Secret, HTTP: in.HTTP, Optional: in.Optional})
	}
	return c
}

// gatherSecrets loads the gate's secrets file as the gate does and keeps the names in it.
func gatherSecrets(path string) *SecretsFacts {
	sf := &SecretsFacts{Path: path}
	m, err := gatefiles.Secrets(path)
	if err != nil {
		sf.Err = err.Error()
		return sf
	}
	for name := range m {
		sf.Names = append(sf.Names, name)
	}
	slices.Sort(sf.Names)
	return sf
}

func gatherGate(ctx context.Context, socket, want string, wait time.Duration) *GateFacts {
	g := &GateFacts{Socket: socket}
	if wait == 0 {
		wait = 6 * time.Second
	}
	start := time.Now()
	for {
		var st gate.Status
		if err := getJSON(ctx, socket, "/status", &st); err != nil {
			g.Err = err.Error()
			return g
		}
		g.Status = &st
		g.Waited = time.Since(start)
		if want == "" || st.PolicyVersion == want || g.Waited >= wait {
			return g
		}
		select {
		case <-ctx.Done():
			return g
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func gatherSigner(ctx context.Context, s Setup) *SignerFacts {
	sf := &SignerFacts{Socket: s.SignerSocket, NotProbed: s.NotProbed, NotProbedOK: s.NotProbedOK}
	var h signer.Health
	if err := getJSON(ctx, s.SignerSocket, "/health", &h); err != nil {
		sf.Err = err.Error()
	} else {
		sf.Health = &h
	}
	if s.ProbeOther != nil {
		uid, refused, how, err := s.ProbeOther(ctx)
		if err != nil {
			sf.NotProbed, sf.NotProbedOK = err.Error(), false
		} else {
			sf.OtherProbed, sf.NotProbed, sf.NotProbedOK = true, "", false
			sf.OtherUID, sf.OtherRefused, sf.OtherHow = uid, refused, how
		}
	}
	return sf
}

func gatherHub(ctx context.Context, url, tokenFile string) *HubFacts {
	h := &HubFacts{URL: url}
	tok, err := hubclient.ReadToken(tokenFile)
	if err != nil {
		h.Err = err.Error()
		return h
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fc := hubclient.NewFacade(url, tok)
	ts, err := fc.Pending(cctx)
	if err != nil {
		h.Err = err.Error()
		return h
	}
	for _, t := range ts {
		h.Pending = append(h.Pending, Pending{ID: t.ID, Kind: t.Kind, Created: t.Created})
	}
	if ps, err := fc.Phones(cctx); err == nil { // an error: no phone page, so no phone
		h.Phones = len(ps)
	}
	return h
}

// auditTail is how much of an audit file's end FindAudit reads: the record it looks for was
// written a moment ago.
const auditTail = 8 << 20

// FindAudit waits (up to 5 s: the gate's audit commits in groups) for the record of request id
// in the gate's audit directory (one file per UTC day; the two newest are read, from their end).
func FindAudit(ctx context.Context, dir, id string) *AuditFacts {
	a := &AuditFacts{Dir: dir, ID: id}
	needle := []byte(`"id":"` + id + `"`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		if err == nil && len(files) == 0 {
			_, err = os.Stat(dir)
		}
		if err != nil {
			a.Err = err.Error()
			return a
		}
		a.Files = len(files)
		slices.Sort(files) // by day
		for i := len(files) - 1; i >= 0 && i >= len(files)-2; i-- {
			found, mod, err := tailContains(files[i], needle)
			if err != nil {
				a.Err = err.Error()
				return a
			}
			if mod.After(a.Latest) {
				a.Latest = mod
			}
			if found {
				a.Found = true
				return a
			}
		}
		if time.Now().After(deadline) {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tailContains reports whether the last auditTail bytes of path hold needle.
func tailContains(path string, needle []byte) (bool, time.Time, error) {
	fh, err := os.Open(path)
	if err != nil {
		return false, time.Time{}, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return false, time.Time{}, err
	}
	off := max(fi.Size()-auditTail, 0)
	data, err := io.ReadAll(io.NewSectionReader(fh, off, fi.Size()-off))
	if err != nil {
		return false, fi.ModTime(), err
	}
	return bytes.Contains(data, needle), fi.ModTime(), nil
}
