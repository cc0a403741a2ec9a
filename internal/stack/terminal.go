package stack

import (
	"errors"
	"os"
	"syscall"
	"unsafe"
)

// errNoTerminal is Run's error without --headless when stdin or stdout is not a terminal.
var errNoTerminal = errors.New("no terminal: use --headless (lox run --headless prints the stack's lines instead of the terminal UI)")

// checkTerminal refuses, before anything starts, a terminal UI without a terminal: stdin and
// stdout must both be one.
func checkTerminal(in, out *os.File) error {
	if !isTerminal(in) || !isTerminal(out) {
		return errNoTerminal
	}
	return nil
}

// isTerminal reports whether f is a terminal: the terminal ioctl answers on it.
func isTerminal(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
