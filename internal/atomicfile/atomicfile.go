// Package atomicfile writes files so that a reader sees the old content or the new, never a part,
// and reads them back within a bound, never cut short.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile writes data to a temporary file in path's directory, syncs it, renames it over path
// and syncs the directory.
func WriteFile(path string, data []byte, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// ErrTooLarge is what ReadFile's and Read's error is (errors.Is) when the file holds more than the
// limit.
var ErrTooLarge = errors.New("the file is larger than the limit")

// TooLargeError is the error of ReadFile and Read for a file larger than the limit.
type TooLargeError struct {
	Path  string
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than %d bytes, more than such a file holds; check the path", e.Path, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// ReadFile reads the file at path, which must hold at most limit bytes: a larger file is a
// *TooLargeError (naming the path, the limit and the fix), never a file cut short. An error
// opening or reading it is returned as the os package gives it, naming the path.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, path, limit)
}

// Read is ReadFile for a file already open (whose mode the caller has checked, say): it reads r
// to its end, at most limit bytes; path names it in the error.
func Read(r io.Reader, path string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	switch {
	case err != nil:
		clear(data) // what was read of a key file goes with the error
		return nil, err
	case int64(len(data)) > limit:
		clear(data)
		return nil, &TooLargeError{Path: path, Limit: limit}
	}
	return data, nil
}
