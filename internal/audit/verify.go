package audit

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Verify checks one audit file's chain and JSON. It reads the whole file and returns the number
// of good records: lines that are a JSON object with an RFC 3339 "time" (on the file's day, when
// the base name is a date) and a "prev" that matches the line before (or the base name, for the
// first line). The chain goes on from every line's bytes, good or bad, so one bad line does not
// condemn the rest. On any bad line the error names the file and the first bad line's number.
//
// The file must keep its base name (the first line hashes it). A chain without a key or an
// outside anchor cannot show that lines were cut off the end, nor resist someone who rewrites
// every line after the one they changed.
func Verify(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, pathError("verify", path, err)
	}
	defer f.Close()
	return verify(f, path)
}

// verify checks the content of the audit file path, read from in.
func verify(in io.Reader, path string) (int, error) {
	name := filepath.Base(path)
	fileDay, dated := parseDay(name)

	r := bufio.NewReaderSize(in, 64<<10)
	h := sha256.New()
	want := chainHash(name)
	var (
		line      []byte // the current line, up to maxLine bytes
		good, bad int
		n         int // line number
		first     error
		err       error
	)
	for {
		var (
			long bool
			torn bool
		)
		line, long, torn, err = readLine(r, h, line[:0])
		if err == io.EOF {
			break
		}
		if err != nil {
			return good, pathError("read", path, err)
		}
		n++
		var why string
		switch {
		case torn:
			why = "no final newline (torn by a crash, or still being written)"
		case long:
			why = fmt.Sprintf("line longer than %d bytes", maxLine)
		default:
			why = checkLine(line, want, n, fileDay, dated, name)
		}
		if why == "" {
			good++
		} else {
			bad++
			if first == nil {
				first = fmt.Errorf("audit: %s:%d: %s", path, n, why)
			}
		}
		var sum [sha256.Size]byte
		hex.Encode(want[:], h.Sum(sum[:0])[:hashLen])
		h.Reset()
	}
	if first != nil && bad > 1 {
		first = fmt.Errorf("%w (%d bad lines in all)", first, bad)
	}
	return good, first
}

// readLine reads one line into line (up to maxLine bytes; long reports more) and feeds all of
// its bytes, without the newline, to h. torn reports a last line without a newline. It returns
// io.EOF only when no byte was left.
func readLine(r *bufio.Reader, h hash.Hash, line []byte) (_ []byte, long, torn bool, _ error) {
	read := false
	for {
		chunk, err := r.ReadSlice('\n')
		if len(chunk) > 0 {
			read = true
		}
		if err == nil {
			chunk = chunk[:len(chunk)-1]
		}
		h.Write(chunk)
		if room := maxLine - len(line); len(chunk) > room {
			line = append(line, chunk[:room]...)
			long = true
		} else {
			line = append(line, chunk...)
		}
		switch {
		case err == nil:
			return line, long, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && read:
			return line, long, true, nil
		default:
			return line, long, false, err
		}
	}
}

// checkLine returns why line (number n, which must carry "prev" want) is bad, or "".
func checkLine(line []byte, want [2 * hashLen]byte, n int, fileDay day, dated bool, name string) string {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return "not JSON: " + err.Error()
	}
	if obj == nil {
		return "not a JSON object"
	}
	var prev, ts string
	if err := json.Unmarshal(obj["prev"], &prev); err != nil || prev == "" {
		return `no "prev" string`
	}
	if prev != string(want[:]) {
		if n == 1 {
			return fmt.Sprintf(`"prev" does not match the file name %q: the first line was deleted or replaced, or the file was renamed`, name)
		}
		return fmt.Sprintf(`"prev" does not match line %d: line %d was edited, or a line was deleted, inserted or reordered here`, n-1, n-1)
	}
	if err := json.Unmarshal(obj["time"], &ts); err != nil {
		return `no "time" string`
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return `"time" is not RFC 3339: ` + err.Error()
	}
	if dated && dayOf(t) != fileDay {
		return fmt.Sprintf(`"time" %s is not on the file's day`, ts)
	}
	return ""
}

// parseDay reads the day from a base name such as 2026-11-30.jsonl.
func parseDay(name string) (day, bool) {
	s, ok := strings.CutSuffix(name, ".jsonl")
	if !ok {
		return day{}, false
	}
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		return day{}, false
	}
	return dayOf(t), true
}
