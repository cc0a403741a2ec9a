package stack

import (
	"errors"
	"os"
	"testing"
)

func TestCheckTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if err := checkTerminal(null, w); !errors.Is(err, errNoTerminal) || err.Error() != "no terminal: use --headless (lox run --headless prints the stack's lines instead of the terminal UI)" {
		t.Fatalf("/dev/null and a pipe: %v", err)
	}
	// A pseudo-terminal is one (its master side answers the terminal ioctl as the slave does).
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to test with: %v", err)
	}
	defer pty.Close()
	if err := checkTerminal(pty, pty); err != nil {
		t.Fatalf("a pseudo-terminal: %v", err)
	}
	if err := checkTerminal(pty, w); !errors.Is(err, errNoTerminal) {
		t.Fatalf("a terminal in, a pipe out: %v", err)
	}
}
