package main

import (
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/auditdb"
)

// readDSNFile reads --dsn-file as verify-log does: the DSN is the file's text, trimmed; it is
// never taken from the command line, where other users read it.
func readDSNFile(path string) (string, error) {
	data, err := atomicfile.ReadFile(path, maxDSNFile)
	if err != nil {
		return "", fmt.Errorf("--dsn-file: %w", err)
	}
	dsn := strings.TrimSpace(string(data))
	clear(data)
	if dsn == "" {
		return "", fmt.Errorf("--dsn-file %s is empty: put the DSN in it (the gate's -audit-dsn-file)", path)
	}
	return dsn, nil
}

// copyKeys reads --pub as verify-log reads it with --dsn-file: KEY trusts a key for every
// gate's chain, GATE=KEY for that gate's alone.
func copyKeys(pubs pubList) (all []ed25519.PublicKey, perGate map[string][]ed25519.PublicKey, err error) {
	if len(pubs) == 0 {
		return nil, nil, fmt.Errorf("the database copy needs --pub: the database holds no key (--pub KEY for every gate, --pub GATE=KEY for one)")
	}
	perGate = map[string][]ed25519.PublicKey{}
	for _, p := range pubs {
		g, file, scoped := strings.Cut(p, "=")
		if !scoped {
			file = p
		}
		k, err := audit.ReadPublicKey(file)
		if err != nil {
			return nil, nil, fmt.Errorf("--pub: %w", err)
		}
		if scoped {
			perGate[g] = append(perGate[g], k)
		} else {
			all = append(all, k)
		}
	}
	return all, perGate, nil
}

// maxRefusalFindings bounds the findings a refused copy's error quotes.
const maxRefusalFindings = 3

// verifiedCopies reads the database copy at dsn (auditdb.Load) and verifies each gate's chain
// as lockhttp verify-log --dsn-file does, with the same keys: the copies of gate (every gate's
// when !only), each clean. A chain that is not clean (tampered, or not vouched for) is an error
// that names it and its findings by file and line: nothing is proposed from a copy that does
// not verify. Lines at a chain's end not covered yet are read again, as verify-log does.
func verifiedCopies(dsn string, pubs pubList, gate string, only bool) ([]*auditdb.Copy, error) {
	all, perGate, err := copyKeys(pubs)
	if err != nil {
		return nil, err
	}
	reps, err := verifyCopies(dsn, all, perGate, gate, only, nil, "")
	if err != nil {
		return nil, err
	}
	var out []*auditdb.Copy
	var refused error
	for _, r := range reps {
		if code := codeOf(r.VerifyReport); code != 0 {
			if refused == nil || !r.OnlyPending() {
				refused = copyRefusal(r.name, code, r.VerifyReport)
			}
			continue
		}
		out = append(out, r.copy)
	}
	if refused != nil {
		return nil, refused
	}
	if len(out) == 0 {
		if only {
			return nil, fmt.Errorf("the database holds no record of %s", gateName(gate))
		}
		return nil, fmt.Errorf("the database holds no record: no gate copies to it yet")
	}
	return out, nil
}

// copyRefusal is the error of a chain that does not verify: its verdict and its first findings
// past notes, each by file and line.
func copyRefusal(name string, code int, rep *audit.VerifyReport) error {
	var fs []string
	more := 0
	for _, f := range rep.Findings {
		if f.Severity == audit.Note {
			continue
		}
		if len(fs) == maxRefusalFindings {
			more++
			continue
		}
		where := f.File
		if f.Line > 0 {
			where = fmt.Sprintf("%s:%d", f.File, f.Line)
		}
		if where != "" {
			where += ": "
		}
		fs = append(fs, where+f.Text)
	}
	if more > 0 {
		fs = append(fs, fmt.Sprintf("and %d more", more))
	}
	return fmt.Errorf("the database copy of %s is %s, nothing is proposed from it: %s (lockhttp verify-log --dsn-file FILE --gate %q gives the whole report)",
		name, verdict(code), strings.Join(fs, "; "), name)
}
