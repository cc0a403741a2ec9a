package audit

import (
	"bufio"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Severity ranks a finding of VerifyDir.
type Severity int

const (
	// Note: worth knowing, the verdict stays clean.
	Note Severity = iota
	// Warning: the log cannot be vouched for (no signed head, no signature at all): never a
	// clean verdict (exit 2).
	Warning
	// Tampered: the log was changed after the gate wrote it (exit 1).
	Tampered
)

func (s Severity) String() string {
	switch s {
	case Warning:
		return "WARN"
	case Tampered:
		return "TAMPERED"
	}
	return "NOTE"
}

// Finding is one thing VerifyDir found, at a file and line (0: the file as a whole; "" file:
// the log as a whole).
type Finding struct {
	Severity Severity `json:"severity"`
	File     string   `json:"file,omitempty"`
	Line     int      `json:"line,omitempty"`
	Text     string   `json:"text"`
	// Pending marks lines at the end of the log not covered yet: a running gate covers what
	// it wrote within a second, so a verifier that finds only such findings reads again.
	Pending bool `json:"pending,omitempty"`
}

func (f Finding) String() string {
	switch {
	case f.File != "" && f.Line > 0:
		return fmt.Sprintf("%-8s %s:%d: %s", f.Severity, f.File, f.Line, f.Text)
	case f.File != "":
		return fmt.Sprintf("%-8s %s: %s", f.Severity, f.File, f.Text)
	}
	return fmt.Sprintf("%-8s %s", f.Severity, f.Text)
}

// Source is one day file to verify: its base name and how to read it.
type Source struct {
	Name string
	Open func() (io.ReadCloser, error)
}

// DirSources lists dir's day files as Sources, oldest first.
func DirSources(dir string) ([]Source, error) {
	names, err := dayFiles(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Source, len(names))
	for i, n := range names {
		path := filepath.Join(dir, n)
		out[i] = Source{Name: n, Open: func() (io.ReadCloser, error) { return os.Open(path) }}
	}
	return out, nil
}

// VerifyOptions are what VerifyDir checks the log against.
type VerifyOptions struct {
	Keys        []ed25519.PublicKey // the trusted public keys; at least one
	Head        *Head               // the log's own signed head; nil: missing (a warning)
	HeadName    string              // where Head came from, for the findings
	Trusted     *Head               // a checkpoint kept elsewhere (--trusted-head); nil: none
	TrustedName string
	// HeadSpoiled are the slots of the head file that hold no whole signed head (SpoiledSlots):
	// a warning, never a clean verdict.
	HeadSpoiled []int
}

// VerifyReport is the outcome of VerifyDir.
type VerifyReport struct {
	Files   int `json:"files"`
	Records int `json:"records"`
	// Intents counts the intent records (a request going out); Unfinished those no record of
	// the request's outcome follows: the gate stopped (killed) while they were out, or, at the
	// end of a running gate's log, they are still out. Each of the first maxUnfinishedNotes is a
	// Note: they leave the verdict clean.
	Intents    int       `json:"intents"`
	Unfinished int       `json:"unfinished"`
	FirstSeq   int64     `json:"first_seq"`
	LastSeq    int64     `json:"last_seq"`
	Findings   []Finding `json:"findings"`
}

// Worst is the highest severity found, Note when nothing was.
func (r *VerifyReport) Worst() Severity {
	w := Note
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w
}

func (r *VerifyReport) add(s Severity, file string, line int, format string, args ...any) {
	if len(r.Findings) >= maxFindings {
		return
	}
	if len(r.Findings) == maxFindings-1 {
		r.Findings = append(r.Findings, Finding{Severity: Tampered, Text: "more findings left out"})
		return
	}
	r.Findings = append(r.Findings, Finding{Severity: s, File: file, Line: line, Text: fmt.Sprintf(format, args...)})
}

func (r *VerifyReport) addPending(file string, line int, format string, args ...any) {
	r.add(Tampered, file, line, format, args...)
	if n := len(r.Findings); n > 0 && r.Findings[n-1].File == file && r.Findings[n-1].Line == line {
		r.Findings[n-1].Pending = true
	}
}

// OnlyPending reports that the report's only Tampered findings are Pending ones: lines at the
// end of the log that a running gate has not covered yet.
func (r *VerifyReport) OnlyPending() bool {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == Tampered {
			if !f.Pending {
				return false
			}
			n++
		}
	}
	return n > 0
}

// maxFindings bounds a report.
const maxFindings = 200

// run is a stretch of consecutive record numbers in one file.
type run struct {
	first, last int64
	file        string
	line        int // the line of first
	lastLine    int
}

// VerifyDir checks a whole audit log: every line's JSON, time and chain ("prev"), every
// signature (a foreign key, a forged or broken one), that the records' numbers ("seq") run from
// the first to the last without a gap or a repeat across the day files (a removed, emptied or
// cut file), that each day's first record names the record before it ("prev_file"), that every
// record is covered by a signature, and that the log reaches its signed head and any trusted
// checkpoint and matches them. Findings name the file and line.
func VerifyDir(srcs []Source, o VerifyOptions) (*VerifyReport, error) {
	if len(o.Keys) == 0 {
		return nil, errors.New("audit: no public key to verify with; pass --pub KEY (the .pub file beside the audit key, a copy kept elsewhere)")
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range o.Keys {
		keys[KeyID(k)] = k
	}
	v := &dirVerifier{rep: &VerifyReport{}, keys: keys, o: o, hashes: map[int64][2 * hashLen]byte{}}
	for _, s := range srcs {
		if err := v.file(s); err != nil {
			return nil, err
		}
	}
	v.finish()
	return v.rep, nil
}

type dirVerifier struct {
	rep    *VerifyReport
	keys   map[string]ed25519.PublicKey
	o      VerifyOptions
	runs   []run
	hashes map[int64][2 * hashLen]byte // line hashes of recent records and of the heads' records
	where  map[int64]string            // file:line of the heads' records
	maxSeq int64
	signed int // signatures that verified
	anySig bool
	// pending are the lines, in files before the current one, that no signature or head has
	// covered yet.
	pending []uncoveredLines
	lastAt  string // file:line of the last record
	outs    Outcomes
}

// keep remembers seq's hash while it may be needed: for a later day's prev_file (recent
// records) or a head.
func (v *dirVerifier) keep(seq int64, h [2 * hashLen]byte) {
	v.hashes[seq] = h
	if len(v.hashes) > 2*keepHashes {
		for s := range v.hashes {
			if s < v.maxSeq-keepHashes && !v.isHead(s) {
				delete(v.hashes, s)
			}
		}
	}
}

// keepHashes is how many recent records' hashes the verifier keeps for prev_file.
const keepHashes = 1 << 16

func (v *dirVerifier) isHead(s int64) bool {
	return v.o.Head != nil && v.o.Head.Seq == s || v.o.Trusted != nil && v.o.Trusted.Seq == s
}

// uncoveredLines are lines first to last of a file that no signature or head covered; torn
// lists those of them that are not records.
type uncoveredLines struct {
	file        string
	first, last int
	torn        []int
}

// covered clears the pending lines of earlier files: a signature or the head at a (file:line)
// covers them.
func (v *dirVerifier) covered(at string) {
	for _, p := range v.pending {
		for _, u := range p.torn {
			v.rep.add(Note, p.file, u, "not a record: a write cut short (a crash or a full disk); the gate signed over it at %s, so it is its own", at)
		}
	}
	v.pending = v.pending[:0]
}

// uncoveredTail reports the lines at the end of the log that no signature or head covers.
// They are Pending: a running gate covers what it wrote within a second (signHead), so a
// verification that reads the log while the gate writes it may see them and should read again.
func (v *dirVerifier) uncoveredTail() {
	for _, p := range v.pending {
		if v.o.Head == nil {
			// The head that would vouch for them is missing, which is itself a warning.
			if len(p.torn) < p.last-p.first+1 {
				v.rep.add(Warning, p.file, p.first, "lines %d to %d come after the last signed record and only the missing signed head could vouch for them", p.first, p.last)
			}
			continue
		}
		for _, u := range p.torn {
			v.rep.addPending(p.file, u, "not a record (not JSON, or a line longer than %d bytes), and no signature covers it", maxLine)
		}
		if len(p.torn) < p.last-p.first+1 {
			v.rep.addPending(p.file, p.first, "lines %d to %d are not covered by a signature, nor by the signed head: added after the gate signed (forged), or written by a gate that stopped before its head named them (its next start signs over them); a gate that is running covers them within a second: verify again", p.first, p.last)
		}
	}
	v.pending = nil
}

type lineFields struct {
	Time     string   `json:"time"`
	Seq      int64    `json:"seq"`
	Prev     string   `json:"prev"`
	PrevFile string   `json:"prev_file"`
	Event    string   `json:"event"`
	ID       string   `json:"id"`
	IDs      []string `json:"ids"`
	URL      string   `json:"url"`
}

func (v *dirVerifier) file(s Source) error {
	in, err := s.Open()
	if err != nil {
		return fmt.Errorf("audit: open %s: %w", s.Name, err)
	}
	defer in.Close()
	v.rep.Files++
	name := s.Name
	fileDay, dated := parseDay(name)
	r := bufio.NewReaderSize(in, 64<<10)
	h := sha256.New()
	want := chainHash(name)
	var (
		line      []byte
		n         int
		lastSeq   int64
		cur       *run
		uncovered []int                         // lines of this file since the last signature that verified
		unseq     []int                         // of them, lines that are not records (torn)
		recent    = map[[2 * hashLen]byte]int{} // line hash → line number, this file
	)
	for {
		var long, torn bool
		line, long, torn, err = readLine(r, h, line[:0])
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("audit: read %s: %w", name, err)
		}
		n++
		var sum [sha256.Size]byte
		var hash [2 * hashLen]byte
		hex.Encode(hash[:], h.Sum(sum[:0])[:hashLen])
		h.Reset()
		prevWant := want
		want = hash
		if len(recent) < 4096 {
			recent[hash] = n
		}
		var f lineFields
		switch {
		case torn:
			v.rep.add(Tampered, name, n, "no final newline: the line is cut short (a crash while the gate was writing it, or the file was cut)")
			continue
		case long:
			uncovered, unseq = append(uncovered, n), append(unseq, n)
			continue
		case json.Unmarshal(line, &f) != nil:
			uncovered, unseq = append(uncovered, n), append(unseq, n)
			continue
		}
		uncovered = append(uncovered, n)
		if f.Seq <= 0 {
			v.rep.add(Tampered, name, n, `no "seq": not a record the gate wrote (inserted), or a record written before the audit was numbered`)
			continue
		}
		at := fmt.Sprintf("%s:%d", name, n)
		// The chain within the file.
		if f.Prev != string(prevWant[:]) {
			switch {
			case n == 1:
				v.rep.add(Tampered, name, n, `"prev" does not match the file name %q: the first line was removed or replaced, or the file was renamed`, name)
			case f.Seq == lastSeq:
				v.rep.add(Tampered, name, n, "record %d appears twice (lines %d and %d): a line was inserted or duplicated", f.Seq, n-1, n)
			case f.Seq < lastSeq:
				v.rep.add(Tampered, name, n, "record %d comes after record %d (line %d): lines were reordered", f.Seq, lastSeq, n-1)
			case recent[toHash(f.Prev)] > 0 && recent[toHash(f.Prev)] < n-1:
				m := recent[toHash(f.Prev)]
				v.rep.add(Tampered, name, n, "lines %d to %d were inserted: this record follows line %d", m+1, n-1, m)
			case f.Seq > lastSeq+1:
				v.rep.add(Tampered, name, n, "records %d to %d were removed before this line (or line %d was edited)", lastSeq+1, f.Seq-1, n-1)
			default:
				v.rep.add(Tampered, name, n-1, "the record was edited: its hash does not match the next line's \"prev\"")
			}
		} else if lastSeq != 0 && f.Seq <= lastSeq {
			v.rep.add(Tampered, name, n, "record %d comes after record %d: lines were reordered", f.Seq, lastSeq)
		}
		// The time.
		t, terr := time.Parse(time.RFC3339Nano, f.Time)
		switch {
		case terr != nil:
			v.rep.add(Tampered, name, n, `"time" %q is not RFC 3339`, f.Time)
		case dated && dayOf(t) != fileDay:
			v.rep.add(Tampered, name, n, `"time" %s is not on the file's day`, f.Time)
		}
		// The link to the day before.
		if n == 1 {
			if f.PrevFile != "" {
				if ph, ok := v.hashes[f.Seq-1]; ok && string(ph[:]) != f.PrevFile {
					v.rep.add(Tampered, name, n, `"prev_file" does not match record %d of the day before: that record was edited, or a day file was replaced`, f.Seq-1)
				}
			} else if f.Seq > 1 && n == 1 {
				v.rep.add(Tampered, name, n, `record %d opens the day without "prev_file": the day's first line was removed or replaced`, f.Seq)
			}
		}
		// Runs of numbers.
		if cur != nil && f.Seq == cur.last+1 {
			cur.last, cur.lastLine = f.Seq, n
		} else {
			v.runs = append(v.runs, run{first: f.Seq, last: f.Seq, file: name, line: n, lastLine: n})
			cur = &v.runs[len(v.runs)-1]
		}
		lastSeq = f.Seq
		v.maxSeq = max(v.maxSeq, f.Seq)
		v.rep.Records++
		v.outs.See(f.Event, f.ID, f.IDs, name, n, f.Time, f.URL)
		v.keep(f.Seq, hash)
		if v.isHead(f.Seq) {
			if v.where == nil {
				v.where = map[int64]string{}
			}
			v.where[f.Seq] = at
		}
		v.lastAt = at
		// The signature, or the signed head naming this record: either vouches for every line
		// before it, back to the last one that did, in this file and the files before it (each
		// day's first record names the last one of the day before).
		signed, kid, ok := checkLineSig(line, v.keys)
		v.anySig = v.anySig || signed
		if !signed && v.headCovers(f.Seq, hash) {
			signed, ok = true, true
		}
		if !signed {
			continue
		}
		if ok {
			v.signed++
			v.covered(at)
			for _, u := range unseq {
				v.rep.add(Note, name, u, "not a record: a write cut short (a crash or a full disk); the gate signed over it at line %d, so it is its own", n)
			}
			uncovered, unseq = uncovered[:0], unseq[:0]
			continue
		}
		switch {
		case v.keys[kid] == nil:
			v.rep.add(Tampered, name, n, "signed by key %s, not a trusted key (%s): a foreign key signed lines %d to %d", kid, keyList(v.keys), uncovered[0], n)
		default:
			v.rep.add(Tampered, name, n, "the signature does not verify: a record in lines %d to %d was edited, inserted or removed and the chain rewritten (forged)", uncovered[0], n)
		}
	}
	// Lines after the file's last signature wait for one in a later file, or the head.
	if len(uncovered) > 0 {
		v.pending = append(v.pending, uncoveredLines{file: name, first: uncovered[0], last: n, torn: slices.Clone(unseq)})
	}
	if n == 0 {
		v.rep.add(Note, name, 0, "empty")
	}
	return nil
}

// headCovers reports whether a head whose signature verifies names record seq with hash h.
func (v *dirVerifier) headCovers(seq int64, h [2 * hashLen]byte) bool {
	for _, hd := range []*Head{v.o.Head, v.o.Trusted} {
		if hd != nil && hd.Seq == seq && hd.Hash == string(h[:]) && hd.Check(v.keys) == nil {
			return true
		}
	}
	return false
}

// maxUnfinishedNotes bounds the notes that name a request whose outcome was never written; the
// rest are counted in one note.
const maxUnfinishedNotes = 20

func (v *dirVerifier) finish() {
	rep := v.rep
	v.uncoveredTail()
	open := v.outs.Open()
	rep.Intents, rep.Unfinished = v.outs.Intents, len(open)+v.outs.Dropped
	for _, x := range open[:min(len(open), maxUnfinishedNotes)] {
		rep.add(Note, x.File, x.Line, "request %s (%s) was sent on to its origin and no record of its outcome follows: the gate stopped (killed) before writing it, or the request is still out", x.ID, Clip(x.URL, 256))
	}
	if more := rep.Unfinished - min(len(open), maxUnfinishedNotes); more > 0 {
		rep.add(Note, "", 0, "%d more requests were sent on to their origin and no record of their outcome follows (of %d intents in all)", more, rep.Intents)
	}
	runs := v.runs
	slices.SortFunc(runs, func(a, b run) int { return int(a.first - b.first) })
	if len(runs) > 0 {
		rep.FirstSeq, rep.LastSeq = runs[0].first, v.maxSeq
		if runs[0].first > 1 {
			rep.add(Note, runs[0].file, runs[0].line, "the log here starts at record %d: the records before it are not in this directory (moved to an archive?); verify them with the archive", runs[0].first)
		}
	}
	for i := 1; i < len(runs); i++ {
		a, b := runs[i-1], runs[i]
		switch {
		case b.first <= a.last:
			rep.add(Tampered, b.file, b.line, "record %d is also at %s:%d: a record was duplicated or inserted", b.first, a.file, a.line+int(b.first-a.first))
		case b.first > a.last+1:
			rep.add(Tampered, b.file, b.line, "records %d to %d are missing (after %s:%d): a day file was removed or emptied, or lines were removed", a.last+1, b.first-1, a.file, a.lastLine)
		}
	}
	if !v.anySig && v.o.Head == nil {
		rep.add(Warning, "", 0, "no record is signed and there is no signed head: the log was written without an audit key; its chain holds, but whoever can write the files can rewrite them")
	}
	v.checkHead(v.o.Head, v.o.HeadName, "the signed head")
	v.checkHead(v.o.Trusted, v.o.TrustedName, "the checkpoint")
	if len(v.o.HeadSpoiled) > 0 {
		var seq int64
		if v.o.Head != nil {
			seq = v.o.Head.Seq
		}
		rep.add(Warning, "", 0, "%s", SpoiledText(orDefault(v.o.HeadName, HeadName), v.o.HeadSpoiled, seq))
	}
	if v.o.Head == nil {
		rep.add(Warning, "", 0, "no signed head (%s): lines cut off the end of the log, or a removed last day file, cannot be found; this is never a clean verdict", orDefault(v.o.HeadName, HeadName))
	}
	if v.o.Head != nil && v.o.Trusted != nil && v.o.Head.Seq < v.o.Trusted.Seq {
		rep.add(Tampered, "", 0, "the signed head names record %d, older than the checkpoint's %d: the head was replaced by an older copy", v.o.Head.Seq, v.o.Trusted.Seq)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// checkHead checks a head or checkpoint against the log.
func (v *dirVerifier) checkHead(h *Head, name, what string) {
	if h == nil {
		return
	}
	rep := v.rep
	if err := h.Check(v.keys); err != nil {
		rep.add(Tampered, name, 0, "%s is %v", what, err)
		return
	}
	hash, ok := v.hashes[h.Seq]
	switch {
	case h.Seq > v.maxSeq:
		last := "no record"
		if v.maxSeq > 0 {
			last = fmt.Sprintf("record %d (%s)", v.maxSeq, v.lastAt)
		}
		rep.add(Tampered, name, 0, "%s names record %d in %s (%s), the log ends at %s: lines were cut off the end, or the last day files removed or emptied",
			what, h.Seq, h.File, h.Time.UTC().Format(time.RFC3339), last)
	case !ok:
		rep.add(Tampered, name, 0, "%s names record %d in %s, which is not in the log", what, h.Seq, h.File)
	case string(hash[:]) != h.Hash:
		rep.add(Tampered, name, 0, "%s does not match record %d (%s): the log was rewritten", what, h.Seq, v.where[h.Seq])
	case h.Seq < v.maxSeq:
		rep.add(Note, name, 0, "%s (record %d, %s) matches; the log has %d records after it", what, h.Seq, h.Time.UTC().Format(time.RFC3339), v.maxSeq-h.Seq)
	default:
		rep.add(Note, name, 0, "%s (record %d, %s) matches the log's last record", what, h.Seq, h.Time.UTC().Format(time.RFC3339))
	}
}

// toHash is a "prev" value as a map key (a wrong length gives a key no line has).
func toHash(s string) [2 * hashLen]byte {
	var h [2 * hashLen]byte
	if len(s) == len(h) {
		copy(h[:], s)
	} else {
		h[0] = 1
	}
	return h
}
