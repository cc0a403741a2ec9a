package atomicfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFile: a file up to the limit is read whole; one byte more is an error naming the path
// and the limit, never the first limit bytes.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 10), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(path, 10); err != nil || len(data) != 10 {
		t.Fatalf("ReadFile at the limit: %d bytes, %v", len(data), err)
	}
	data, err := ReadFile(path, 9)
	if !errors.Is(err, ErrTooLarge) || data != nil || !strings.Contains(err.Error(), path+" is larger than 9 bytes") {
		t.Fatalf("ReadFile over the limit: %q, %v", data, err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 9); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file: %v", err)
	}
	if _, err := ReadFile(dir, 9); err == nil || errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadFile of a directory: %v", err)
	}
}
