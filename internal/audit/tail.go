package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"
)

// maxTailLine is the longest line Tail passes on; a longer one is skipped (Verify reads it).
const maxTailLine = 1 << 20

// dayFileName is the base name of a day file.
var dayFileName = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}\.jsonl$`)

// TailOptions says what Tail reads. The zero value reads nothing already written and stops.
type TailOptions struct {
	// Last is how many records already written to show first: the last ones of the latest day
	// file. 0: none.
	Last int
	// Follow keeps reading the records written after, into the next day's file, until ctx ends.
	Follow bool
	// Poll is how often Follow looks for new records. Zero: 200ms.
	Poll time.Duration
	// CaughtUp, if set, is called once the records already written (the Last of them) have been
	// passed on, before any record written after.
	CaughtUp func()
}

// Tail calls each with the last o.Last records of dir's latest day file and, with o.Follow, with
// every record written after, until ctx ends; it returns nil then, or the error that stopped it.
// A record is passed once its line is complete (its newline written), without the newline, in
// the order of the file; each must not keep the slice. A line longer than 1 MiB is skipped, and
// so are records a writer adds to a day's file after the next day's file appeared (the minutes
// around midnight).
func Tail(ctx context.Context, dir string, o TailOptions, each func(line []byte)) error {
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	t := &tailer{dir: dir, each: each}
	name, err := t.latest("")
	if err != nil {
		return err
	}
	if name != "" {
		if err := t.open(name, o.Last); err != nil {
			return err
		}
		if err := t.read(); err != nil {
			return err
		}
	}
	if o.CaughtUp != nil {
		o.CaughtUp()
	}
	if !o.Follow {
		t.close()
		return nil
	}
	defer t.close()
	tick := time.NewTicker(o.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := t.read(); err != nil {
			return err
		}
		// A newer day file: the current one is done once read to its end.
		next, err := t.latest(t.name)
		if err != nil {
			return err
		}
		if next != "" {
			if err := t.read(); err != nil {
				return err
			}
			t.close()
			if err := t.open(next, all); err != nil {
				return err
			}
			if err := t.read(); err != nil {
				return err
			}
		}
	}
}

type tailer struct {
	dir  string
	each func([]byte)

	name    string   // base name of the open file; "" before the first
	f       *os.File // nil before the first
	off     int64    // where the next read starts
	partial []byte   // the start of a line whose newline is not written yet
	skip    bool     // the line being read is over maxTailLine: drop it up to its newline
}

// latest is the name of the latest day file after after ("" for any), or "" when there is none.
func (t *tailer) latest(after string) (string, error) {
	ents, err := os.ReadDir(t.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && after == "" {
			return "", nil // not created yet: the gate creates it when it starts
		}
		return "", pathError("read", t.dir, err)
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); dayFileName.MatchString(n) && e.Type().IsRegular() && n > after {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	sort.Strings(names)
	return names[len(names)-1], nil
}

// all is open's n for a file to read from its start.
const all = -1

// open opens name and sets the offset to the start of its last n complete lines (all: its
// start).
func (t *tailer) open(name string, n int) error {
	path := filepath.Join(t.dir, name)
	f, err := os.Open(path)
	if err != nil {
		return pathError("open", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return pathError("stat", path, err)
	}
	var start int64
	if n != all {
		start, err = lastLines(f, fi.Size(), n)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: %s: %w", path, err)
	}
	t.name, t.f, t.off, t.partial, t.skip = name, f, start, nil, false
	return nil
}

func (t *tailer) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}

// read passes on every line completed since the last read.
func (t *tailer) read() error {
	if t.f == nil {
		name, err := t.latest("")
		if err != nil || name == "" {
			return err
		}
		if err := t.open(name, all); err != nil { // it appeared after Tail started
			return err
		}
	}
	fi, err := t.f.Stat()
	if err != nil {
		return pathError("stat", t.f.Name(), err)
	}
	if fi.Size() < t.off {
		// The file is shorter than what was read: it was replaced (a restore). Start over.
		t.off, t.partial, t.skip = 0, nil, false
	}
	buf := make([]byte, 64<<10)
	for t.off < fi.Size() {
		n, err := t.f.ReadAt(buf[:min(int64(len(buf)), fi.Size()-t.off)], t.off)
		t.off += int64(n)
		t.lines(buf[:n])
		if err != nil && err != io.EOF {
			return pathError("read", t.f.Name(), err)
		}
		if n == 0 {
			break
		}
	}
	return nil
}

// lines splits data at newlines and passes on each complete line.
func (t *tailer) lines(data []byte) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !t.skip {
				t.partial = append(t.partial, data...)
				if len(t.partial) > maxTailLine {
					t.partial, t.skip = nil, true
				}
			}
			return
		}
		line := data[:i]
		data = data[i+1:]
		if t.skip {
			t.skip = false
			continue
		}
		if len(t.partial) > 0 {
			line = append(t.partial, line...)
			t.partial = t.partial[:0]
		}
		if len(line) <= maxTailLine && len(bytes.TrimSpace(line)) > 0 {
			t.each(line)
		}
	}
}

// lastLines returns the offset of the start of the last n complete lines of r (size bytes): a
// torn last line (no newline yet) is not one of them.
func lastLines(r io.ReaderAt, size int64, n int) (int64, error) {
	var buf [32 << 10]byte
	seen := -1 // newlines seen from the end, less one: the first ends the last complete line
	for pos := size; pos > 0; {
		k := min(int64(len(buf)), pos)
		chunk := buf[:k]
		if _, err := r.ReadAt(chunk, pos-k); err != nil && err != io.EOF {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				continue
			}
			seen++
			if seen == n {
				return pos - k + int64(i) + 1, nil
			}
		}
		pos -= k
	}
	// No complete line (read from the start as lines complete), or fewer than n: all of them.
	return 0, nil
}
