package stack

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestLockState(t *testing.T) {
	state := t.TempDir()
	first, err := lockState(state)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(state, LockFile))
	if err != nil || strings.TrimSpace(string(data)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q (%v), want this pid", data, err)
	}

	// flock locks belong to the open file: a second open in this process is refused as another
	// process's would be.
	_, err = lockState(state)
	var busy *BusyError
	if !errors.As(err, &busy) || busy.PID != os.Getpid() || busy.Proxy != "" {
		t.Fatalf("second lock: %v (%#v), want a BusyError with this pid and no proxy", err, busy)
	}
	want := state + ": a stack is already running here (pid " + strconv.Itoa(os.Getpid()) + ", still starting); stop it or use --state DIR"
	if err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}

	// Once the holder wrote up.json, the error names its proxy.
	if err := writeUp(state, &Up{Gate: "http://127.0.0.1:3130", PIDs: map[string]int{"lox": os.Getpid()}}); err != nil {
		t.Fatal(err)
	}
	_, err = lockState(state)
	if !errors.As(err, &busy) || busy.Proxy != "http://127.0.0.1:3130" ||
		!strings.Contains(err.Error(), "(pid "+strconv.Itoa(os.Getpid())+", proxy http://127.0.0.1:3130); stop it or use --state DIR") {
		t.Fatalf("with up.json: %v", err)
	}
	// The refused attempts changed nothing: the pid and up.json are the holder's.
	if data, _ := os.ReadFile(filepath.Join(state, LockFile)); strings.TrimSpace(string(data)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file now holds %q", data)
	}
	if _, err := os.Stat(filepath.Join(state, UpFile)); err != nil {
		t.Errorf("up.json: %v", err)
	}

	first.Close()
	again, err := lockState(state)
	if err != nil {
		t.Fatalf("after the holder closed it: %v", err)
	}
	again.Close()
}

// An up.json that names another process than the lock's holder is not the holder's: the error
// does not take its proxy for the holder's.
func TestBusyIgnoresAnotherUpJSON(t *testing.T) {
	state := t.TempDir()
	os.WriteFile(filepath.Join(state, LockFile), []byte("4242\n"), 0o600)
	writeUp(state, &Up{Gate: "http://127.0.0.1:9", PIDs: map[string]int{"lox": 4141}})
	if e := busy(state); e.PID != 4242 || e.Proxy != "" {
		t.Fatalf("busy = %#v", e)
	}
	// A lock file that does not say (the holder between its lock and its write): up.json's pid.
	os.WriteFile(filepath.Join(state, LockFile), nil, 0o600)
	if e := busy(state); e.PID != 4141 || e.Proxy != "http://127.0.0.1:9" {
		t.Fatalf("busy = %#v", e)
	}
}

func TestRemoveOwnUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		kept bool
	}{
		{"this process's", os.Getpid(), false},
		{"another process's", os.Getpid() + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			writeUp(state, &Up{PIDs: map[string]int{"lox": tc.pid}})
			removeOwnUp(state)
			_, err := os.Stat(filepath.Join(state, UpFile))
			if kept := err == nil; kept != tc.kept {
				t.Fatalf("up.json kept: %v, want %v", kept, tc.kept)
			}
		})
	}
}
