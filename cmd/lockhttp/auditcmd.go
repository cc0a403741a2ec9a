package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/auditdb"
)

const verifyUsage = `usage: lockhttp verify-log [--pub KEY]... [--trusted-head FILE] [--json] DIR
       lockhttp verify-log --dsn-file FILE [--pub [GATE=]KEY]... [--gate GATE] [--trusted-head FILE] [--json]

Checks the gate's audit: every record's chain, number and signature, the day files' links, and
that the log reaches its signed head (DIR/head.json) and any checkpoint (--trusted-head, made
with lockhttp audit checkpoint and kept elsewhere). With --dsn-file it checks the database copy:
the chain of every gate that copies to it (a fleet's gates, each under its identity and instance,
GATE@INSTANCE), or those --gate names, each with the keys --pub gives for its identity (GATE=KEY)
and those given for every gate (KEY). Each finding names the chain, the file and the line. Exit
status: 0 clean, 1 tampered, 2
usage or a log that cannot be vouched for (no signed head, no signature).
`

type pubList []string

func (l *pubList) String() string     { return strings.Join(*l, ",") }
func (l *pubList) Set(s string) error { *l = append(*l, s); return nil }

// maxDSNFile bounds the read of --dsn-file.
const maxDSNFile = 4 << 10

func runVerifyLog(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp verify-log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, verifyUsage); fs.PrintDefaults() }
	var pubs pubList
	fs.Var(&pubs, "pub", "a trusted public `KEY` file (repeatable; default: DIR/audit.key.pub, which whoever can write DIR can replace); with --dsn-file, GATE=KEY trusts it for that gate's chain alone")
	trusted := fs.String("trusted-head", "", "a checkpoint `FILE` (lockhttp audit checkpoint) the log must reach and match")
	dsn := fs.String("dsn", "", "verify the PostgreSQL copy at `DSN` instead of a directory (on the command line, where other users read it: prefer --dsn-file; env: the value of LOCKHTTP_AUDIT_DSN)")
	dsnFile := fs.String("dsn-file", "", "verify the PostgreSQL copy whose DSN `FILE` holds (the gate's -audit-dsn-file), instead of a directory")
	gate := fs.String("gate", "", "with --dsn-file, verify the chains of this gate `IDENTITY` alone (spiffe://lockhttp/gate/NAME, each of its instances; NAME@INSTANCE one; \"\" the gate without one)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int { return verifyUsageError(stderr, format, a...) }
	if *dsn != "" && *dsnFile != "" {
		return fail("--dsn and --dsn-file: give one")
	}
	if *dsnFile != "" {
		data, err := atomicfile.ReadFile(*dsnFile, maxDSNFile)
		if err != nil {
			return fail("--dsn-file: %v", err)
		}
		*dsn = strings.TrimSpace(string(data))
		if *dsn == "" {
			return fail("--dsn-file %s is empty: put the DSN in it", *dsnFile)
		}
	} else if *dsn == "env" {
		*dsn = os.Getenv("LOCKHTTP_AUDIT_DSN")
	}
	if *dsn == "" && fs.NArg() != 1 || *dsn != "" && fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	gateGiven := false
	fs.Visit(func(f *flag.Flag) { gateGiven = gateGiven || f.Name == "gate" })
	if gateGiven && *dsn == "" {
		return fail("--gate is for the database copy (--dsn-file): a directory is one gate's")
	}
	var o audit.VerifyOptions
	if *dsn != "" {
		return verifyDatabase(*dsn, pubs, *gate, gateGiven, *trusted, *asJSON, stdout, stderr)
	}
	dir := fs.Arg(0)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fail("%s: not a directory: give the audit directory (records chain across its day files)", dir)
	}
	if len(pubs) == 0 {
		def := filepath.Join(dir, audit.KeyFileName+audit.PubSuffix)
		if _, err := os.Stat(def); err != nil {
			return fail("no --pub given and no %s: pass --pub with the audit key's public half", def)
		}
		pubs = append(pubs, def)
		fmt.Fprintf(stdout, "NOTE     the public key is %s, in the log's own directory: whoever can write the log can replace it; pass --pub with a copy kept elsewhere\n", def)
	}
	for _, p := range pubs {
		k, err := audit.ReadPublicKey(p)
		if err != nil {
			return fail("--pub: %v", err)
		}
		o.Keys = append(o.Keys, k)
	}
	if *trusted != "" {
		h, err := audit.ReadHead(*trusted, o.Keys...)
		if err != nil {
			return fail("--trusted-head: %v", err)
		}
		o.Trusted, o.TrustedName = h, *trusted
	}
	// A running gate covers what it wrote within a second: a log whose only findings are
	// lines at its end not covered yet is read again, a few times, before they count.
	var rep *audit.VerifyReport
	for try := 0; ; try++ {
		var code int
		rep, code = verifyOnce(dir, &o, stdout, stderr)
		if rep == nil {
			return code
		}
		if !rep.OnlyPending() || try == pendingRetries {
			break
		}
		time.Sleep(pendingWait)
	}
	code := codeOf(rep)
	if *asJSON {
		json.NewEncoder(stdout).Encode(struct {
			*audit.VerifyReport
			Verdict string `json:"verdict"`
		}{rep, verdict(code)})
		return code
	}
	for _, f := range rep.Findings {
		fmt.Fprintln(stdout, f)
	}
	fmt.Fprintf(stdout, "%s: %d records (%d to %d) in %d files, keys %s\n", verdict(code), rep.Records, rep.FirstSeq, rep.LastSeq, rep.Files, keyIDs(o.Keys))
	return code
}

// codeOf is the exit status of a report.
func codeOf(rep *audit.VerifyReport) int {
	switch rep.Worst() {
	case audit.Tampered:
		return 1
	case audit.Warning:
		return 2
	}
	return 0
}

// gateReport is one gate's chain in the database, verified.
type gateReport struct {
	Gate     string `json:"gate"`
	Instance string `json:"instance,omitempty"`
	*audit.VerifyReport
	Verdict string `json:"verdict"`
	keys    []ed25519.PublicKey
	name    string
	copy    *auditdb.Copy // the chain's database copy, when it is one
}

// verifyCopies loads the database copy at dsn and verifies each gate's chain (gate's alone, when
// only) with the keys all and perGate give it, and against trusted when there is one. While the
// only findings are lines at the chains' ends that no signed head covers yet, it loads and
// verifies again (pendingRetries times at most): the gates' copiers are behind, not wrong.
func verifyCopies(dsn string, all []ed25519.PublicKey, perGate map[string][]ed25519.PublicKey, gate string, only bool,
	trusted *audit.Head, trustedName string) ([]*gateReport, error) {
	var reps []*gateReport
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		copies, err := auditdb.Load(ctx, dsn)
		cancel()
		if err != nil {
			return nil, err
		}
		reps = reps[:0]
		pending := false
		for _, c := range copies {
			if only && c.Gate != gate && c.Name() != gate {
				continue
			}
			keys := append(append([]ed25519.PublicKey{}, all...), perGate[c.Gate]...)
			if len(keys) == 0 {
				return nil, fmt.Errorf("no key for %s: pass --pub %s=KEY with its audit key's public half, or --pub KEY for every gate", gateName(c.Gate), c.Gate)
			}
			o := audit.VerifyOptions{Keys: keys, Head: c.Head, HeadName: "the database's head of " + chainName(c)}
			if trusted != nil {
				o.Trusted, o.TrustedName = trusted, trustedName
			}
			rep, err := audit.VerifyDir(c.Sources, o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", chainName(c), err)
			}
			pending = pending || rep.OnlyPending()
			reps = append(reps, &gateReport{Gate: c.Gate, Instance: c.Instance, VerifyReport: rep, Verdict: verdict(codeOf(rep)), keys: keys, name: chainName(c), copy: c})
		}
		onlyPending := pending
		for _, r := range reps {
			onlyPending = onlyPending && (r.OnlyPending() || len(r.Findings) == 0)
		}
		if !onlyPending || try == pendingRetries {
			return reps, nil
		}
		time.Sleep(pendingWait)
	}
}

// gateName names a gate's chain in verify-log's lines: GATE@INSTANCE.
func gateName(g string) string {
	if g == "" {
		return "the gate without an identity"
	}
	return g
}

// chainName names a copy's chain in verify-log's lines.
func chainName(c *auditdb.Copy) string {
	if c.Gate == "" && c.Instance == "" {
		return gateName("")
	}
	return c.Name()
}

// verifyDatabase verifies each gate's chain in the database at dsn (or gate's alone, when
// only): each with the keys pubs gives it.
func verifyDatabase(dsn string, pubs pubList, gate string, only bool, trusted string, asJSON bool, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int { return verifyUsageError(stderr, format, a...) }
	all, perGate, err := copyKeys(pubs)
	if err != nil {
		return fail("%v", err)
	}
	var trustedHead *audit.Head
	if trusted != "" {
		if !only {
			return fail("--trusted-head is one gate's checkpoint: name the gate with --gate")
		}
		h, err := audit.ReadHead(trusted, append(append([]ed25519.PublicKey{}, all...), perGate[gate]...)...)
		if err != nil {
			return fail("--trusted-head: %v", err)
		}
		trustedHead = h
	}
	reps, err := verifyCopies(dsn, all, perGate, gate, only, trustedHead, trusted)
	if err != nil {
		return fail("%v", err)
	}
	if len(reps) == 0 {
		if only {
			return fail("the database holds no record of %s", gateName(gate))
		}
		return fail("the database holds no record: no gate copies to it yet")
	}
	code := 0 // tampered (1) beats not verified (2), which beats clean
	for _, r := range reps {
		switch c := codeOf(r.VerifyReport); {
		case c == 1:
			code = 1
		case c == 2 && code == 0:
			code = 2
		}
	}
	if asJSON {
		json.NewEncoder(stdout).Encode(struct {
			Gates   []*gateReport `json:"gates"`
			Verdict string        `json:"verdict"`
		}{reps, verdict(code)})
		return code
	}
	for _, r := range reps {
		for _, f := range r.Findings {
			fmt.Fprintf(stdout, "%s: %s\n", r.name, f)
		}
		fmt.Fprintf(stdout, "%s: %s: %d records (%d to %d) in %d files, keys %s\n", r.name, r.Verdict, r.Records, r.FirstSeq, r.LastSeq, r.Files, keyIDs(r.keys))
	}
	fmt.Fprintf(stdout, "%s: %d chains in the database copy\n", verdict(code), len(reps))
	return code
}

func verdict(code int) string {
	switch code {
	case 1:
		return "TAMPERED"
	case 2:
		return "NOT VERIFIED"
	}
	return "CLEAN"
}

func keyIDs(keys []ed25519.PublicKey) string {
	var ids []string
	for _, k := range keys {
		ids = append(ids, audit.KeyID(k))
	}
	return strings.Join(ids, ", ")
}

const auditUsage = `usage:
  lockhttp audit keygen --key FILE         make the audit key (FILE, mode 0600, and FILE.pub); never replaces one
  lockhttp audit checkpoint [--pub KEY] [-o FILE] DIR
                                            copy DIR's signed head out, for verify-log --trusted-head
  lockhttp audit migrate --dsn-file FILE    create the PostgreSQL tables of the database copy, or bring
                                            them to this version (--dsn DSN: on the command line)
`

func runAudit(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, auditUsage)
		return 2
	}
	switch args[0] {
	case "keygen":
		return runKeygen(args[1:], stdout, stderr)
	case "checkpoint":
		return runCheckpoint(args[1:], stdout, stderr)
	case "migrate":
		return runMigrate(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "lockhttp audit: unknown command %q\n%s", args[0], auditUsage)
	return 2
}

func runKeygen(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp audit keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	key := fs.String("key", "", "the private key `FILE` to create (the gate's -audit-key; default there: AUDIT_DIR/audit.key)")
	if err := fs.Parse(args); err != nil || *key == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, auditUsage)
		return 2
	}
	pub, err := audit.GenerateKey(*key, nil)
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp audit keygen:", err)
		return 1
	}
	fmt.Fprintf(stdout, "audit key %s created (mode 0600), key id %s; its public half is %s:\n\n%s\n"+
		"Keep a copy of the public half, and checkpoints (lockhttp audit checkpoint), out of reach of whoever can write the audit.\n",
		*key, audit.KeyID(pub), *key+audit.PubSuffix, audit.EncodePublicKey(pub))
	return 0
}

func runCheckpoint(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp audit checkpoint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pubPath := fs.String("pub", "", "the public `KEY` to check the head with (default: DIR/audit.key.pub)")
	out := fs.String("o", "", "write the checkpoint to `FILE` (default: standard output)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprint(stderr, auditUsage)
		return 2
	}
	dir := fs.Arg(0)
	if *pubPath == "" {
		*pubPath = filepath.Join(dir, audit.KeyFileName+audit.PubSuffix)
	}
	pub, err := audit.ReadPublicKey(*pubPath)
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp audit checkpoint:", err)
		return 2
	}
	h, err := audit.ReadHead(filepath.Join(dir, audit.HeadName), pub)
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp audit checkpoint:", err, "(the gate writes it after each batch; is DIR the gate's -audit?)")
		return 2
	}
	if err := h.Check(map[string]ed25519.PublicKey{audit.KeyID(pub): pub}); err != nil {
		fmt.Fprintf(stderr, "lockhttp audit checkpoint: %s: the head is %v\n", filepath.Join(dir, audit.HeadName), err)
		return 1
	}
	data, _ := json.Marshal(h)
	data = append(data, '\n')
	if *out == "" {
		stdout.Write(data)
		return 0
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp audit checkpoint:", err, "(a checkpoint is never overwritten: name a new file)")
		return 1
	}
	fmt.Fprintf(stdout, "checkpoint of record %d (%s, %s) written to %s: keep it out of reach of whoever can write the audit, and pass it to verify-log --trusted-head\n",
		h.Seq, h.File, h.Time.UTC().Format(time.RFC3339), *out)
	return 0
}

func runMigrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp audit migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "the PostgreSQL `DSN` (env: the value of LOCKHTTP_AUDIT_DSN; on the command line other users read it: prefer --dsn-file)")
	dsnFile := fs.String("dsn-file", "", "a `FILE` holding the DSN (the gate's -audit-dsn-file)")
	if err := fs.Parse(args); err != nil || (*dsn == "") == (*dsnFile == "") || fs.NArg() > 0 {
		fmt.Fprint(stderr, auditUsage)
		return 2
	}
	d := *dsn
	if d == "env" {
		d = os.Getenv("LOCKHTTP_AUDIT_DSN")
	}
	if *dsnFile != "" {
		data, err := atomicfile.ReadFile(*dsnFile, maxDSNFile)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp audit migrate: --dsn-file:", err)
			return 2
		}
		d = strings.TrimSpace(string(data))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := auditdb.Migrate(ctx, d); err != nil {
		fmt.Fprintln(stderr, "lockhttp audit migrate:", err)
		return 1
	}
	fmt.Fprintln(stdout, "the audit tables exist")
	return 0
}

// Retries of a verification whose only findings are pending lines (VerifyReport.OnlyPending).
const (
	pendingRetries = 6
	pendingWait    = 500 * time.Millisecond
)

// verifyOnce reads the log in dir and its head, and verifies it; a nil report comes with the
// exit code.
func verifyOnce(dir string, o *audit.VerifyOptions, stdout, stderr io.Writer) (*audit.VerifyReport, int) {
	fail := func(format string, a ...any) int { return verifyUsageError(stderr, format, a...) }
	srcs, err := audit.DirSources(dir)
	if err != nil {
		return nil, fail("%v", err)
	}
	o.HeadName, o.Head, o.HeadSpoiled = filepath.Join(dir, audit.HeadName), nil, nil
	if h, err := audit.ReadHead(o.HeadName, o.Keys...); err == nil {
		o.Head = h
		o.HeadSpoiled, _ = audit.SpoiledSlots(o.HeadName, o.Keys...)
	} else if !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stdout, "%s\n", audit.Finding{Severity: audit.Tampered, File: o.HeadName, Text: err.Error()})
		return nil, 1
	}
	rep, err := audit.VerifyDir(srcs, *o)
	if err != nil {
		return nil, fail("%v", err)
	}
	return rep, 0
}

// verifyUsageError prints a verify-log error that is not a finding about the log and returns
// its exit code, 2.
func verifyUsageError(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "lockhttp verify-log: "+format+"\n", a...)
	return 2
}
