package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// maxLine bounds one line: the writer reads at most this much of a file's tail on open, and
// Verify rejects longer lines. Real records are far shorter (net/http caps a request head at
// 1 MiB, and escaping at most sextuples it).
const maxLine = 64 << 20

// hashLen is how many bytes of SHA-256 go into "prev" (hex-encoded, so twice as many characters).
const hashLen = 16

// file is what the writer needs of an open audit file; tests substitute failing ones.
type file interface {
	io.Writer
	io.ReaderAt
	Sync() error
	Close() error
	Stat() (fs.FileInfo, error)
	Truncate(size int64) error
}

// fileSystem opens audit files and syncs their directory; tests substitute failing ones.
type fileSystem interface {
	OpenFile(path string) (file, error)
	SyncDir(dir string) error
}

type osFS struct{}

func (osFS) OpenFile(path string) (file, error) {
	// O_RDWR, not O_WRONLY: the tail is read back (pread) to continue the chain.
	return os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// day is a UTC calendar day; each has its own file.
type day struct {
	year  int
	month time.Month
	day   int
}

func dayOf(t time.Time) day {
	y, m, d := t.UTC().Date()
	return day{y, m, d}
}

// fileName is the day's base name, e.g. 2026-11-30.jsonl.
func (d day) fileName() string {
	return time.Date(d.year, d.month, d.day, 0, 0, 0, 0, time.UTC).Format("2006-01-02") + ".jsonl"
}

// chainHash is the "prev" value that follows line (a line's bytes without its newline, or a
// file's base name for the first line).
func chainHash[T string | []byte](line T) [2 * hashLen]byte {
	sum := sha256.Sum256([]byte(line))
	var h [2 * hashLen]byte
	hex.Encode(h[:], sum[:hashLen])
	return h
}

// dayFile is one open audit file and the "prev" value its next line carries.
type dayFile struct {
	day  day
	path string
	f    file
	prev [2 * hashLen]byte
	size int64 // the file's size after the last batch that was written whole
	// dirty reports records written (by Submit) and not yet fsync'ed.
	dirty bool
}

// openDay opens (creating if needed) the file for d and reads back its tail to continue the
// chain. A torn last line (no final newline, after a crash) is completed with a newline; the
// chain continues from its bytes.
func openDay(fsys fileSystem, dir string, d day, sync bool) (*dayFile, error) {
	name := d.fileName()
	path := filepath.Join(dir, name)
	f, err := fsys.OpenFile(path)
	if err != nil {
		return nil, pathError("open", path, err)
	}
	df := &dayFile{day: d, path: path, f: f}
	if err := df.resume(fsys, dir, name, sync); err != nil {
		f.Close()
		return nil, err
	}
	return df, nil
}

func (df *dayFile) resume(fsys fileSystem, dir, name string, sync bool) error {
	fi, err := df.f.Stat()
	if err != nil {
		return pathError("stat", df.path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("audit: %s: not a regular file; move it aside", df.path)
	}
	size := fi.Size()
	df.size = size
	if size == 0 {
		df.prev = chainHash(name)
		if sync {
			// A new file's directory entry must survive a crash too.
			if err := fsys.SyncDir(dir); err != nil {
				return pathError("sync", dir, err)
			}
		}
		return nil
	}
	var last [1]byte
	if _, err := df.f.ReadAt(last[:], size-1); err != nil {
		return pathError("read", df.path, err)
	}
	end := size // end of the last line's bytes, without its newline
	torn := last[0] != '\n'
	if !torn {
		end--
	}
	start, err := lineStart(df.f, end)
	if err != nil {
		return fmt.Errorf("audit: %s: %w; move the file aside", df.path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(df.f, start, end-start)); err != nil {
		return pathError("read", df.path, err)
	}
	hex.Encode(df.prev[:], h.Sum(nil)[:hashLen])
	if torn {
		if _, err := df.f.Write([]byte{'\n'}); err != nil {
			return pathError("write", df.path, err)
		}
		df.size++
		if sync {
			if err := df.f.Sync(); err != nil {
				return pathError("sync", df.path, err)
			}
		}
	}
	return nil
}

// lineStart returns the offset just after the last newline before end (0 if none), reading
// backwards in chunks and at most maxLine bytes.
func lineStart(r io.ReaderAt, end int64) (int64, error) {
	var buf [32 << 10]byte
	for pos := end; pos > 0; {
		if end-pos >= maxLine {
			return 0, fmt.Errorf("last line is longer than %d bytes", maxLine)
		}
		n := min(int64(len(buf)), pos)
		chunk := buf[:n]
		if _, err := r.ReadAt(chunk, pos-n); err != nil {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] == '\n' {
				return pos - n + int64(i) + 1, nil
			}
		}
		pos -= n
	}
	return 0, nil
}

// pathError words err as "audit: OP PATH: CAUSE", keeping the cause for errors.Is, without the
// path twice when err is already an *fs.PathError.
func pathError(op, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("audit: %s %s: %w", op, path, err)
}

// lastInfo is what Open needs of the directory's last record to continue the global chain.
type lastInfo struct {
	seq    int64             // the highest record number (0: none, or only records without one)
	hash   [2 * hashLen]byte // its line's hash
	file   string            // its day file's base name
	lines  bool              // the directory holds any line
	signed bool              // the newest file's last line is signed, or the head names it
}

// dayFiles lists the day files of dir (names YYYY-MM-DD.jsonl), oldest first.
func dayFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, pathError("read", dir, err)
	}
	var names []string
	for _, e := range entries {
		if _, ok := parseDay(e.Name()); ok && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// lastRecord finds the directory's last record: the highest "seq" among the last lines of the
// two newest non-empty day files (a record of the old day can follow the new day's first ones).
func lastRecord(dir string) (lastInfo, error) {
	var li lastInfo
	names, err := dayFiles(dir)
	if err != nil {
		return li, err
	}
	looked := 0
	for i := len(names) - 1; i >= 0 && looked < 2; i-- {
		path := filepath.Join(dir, names[i])
		lines, err := tailLines(path, 4)
		if err != nil {
			return li, err
		}
		if len(lines) == 0 {
			continue
		}
		if looked == 0 {
			li.lines = true
			li.signed = strings.Contains(string(lines[len(lines)-1]), sigPrefix)
		}
		looked++
		for j := len(lines) - 1; j >= 0; j-- {
			var r struct {
				Seq int64 `json:"seq"`
			}
			if json.Unmarshal(lines[j], &r) != nil || r.Seq == 0 {
				continue
			}
			if r.Seq > li.seq {
				li.seq, li.hash, li.file = r.Seq, chainHash(lines[j]), names[i]
			}
			break
		}
	}
	if li.lines && !li.signed && li.seq > 0 {
		// A gate that stopped cleanly signed its head over its last records. (Whether the
		// head's signature verifies is verify-log's business: here it only spares a seal.)
		if h, err := ReadHead(filepath.Join(dir, HeadName)); err == nil && h.Seq == li.seq && h.Hash == string(li.hash[:]) {
			li.signed = true
		}
	}
	return li, nil
}

// tailLines returns up to n last lines of path (without newlines; a torn last line included).
func tailLines(path string, n int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, pathError("open", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, pathError("stat", path, err)
	}
	end := fi.Size()
	var out [][]byte
	for end > 0 && len(out) < n {
		stop := end
		var last [1]byte
		if _, err := f.ReadAt(last[:], end-1); err != nil {
			return nil, pathError("read", path, err)
		}
		if last[0] == '\n' {
			stop--
		}
		start, err := lineStart(f, stop)
		if err != nil {
			return nil, fmt.Errorf("audit: %s: %w", path, err)
		}
		line := make([]byte, stop-start)
		if _, err := f.ReadAt(line, start); err != nil {
			return nil, pathError("read", path, err)
		}
		out = append([][]byte{line}, out...)
		end = start
	}
	return out, nil
}
