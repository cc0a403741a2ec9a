package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
)

// LockFile is the lock file in the state directory. A running stack holds an exclusive flock on
// it from before it touches anything until it exits (the kernel releases it when the process
// ends, however it ends); the file says the holder's pid. It is never removed: removing a lock
// file lets a second process lock a new file of the same name while the first still holds the
// old one.
const LockFile = "lock"

// BusyError is Run's error when another stack holds the state directory's lock.
type BusyError struct {
	State string // the state directory
	PID   int    // the holder's pid, from the lock file; 0 when it does not say (yet)
	Proxy string // the holder's proxy URL, from its up.json; "" before it wrote one
}

func (e *BusyError) Error() string {
	who := "pid unknown"
	if e.PID > 0 {
		who = "pid " + strconv.Itoa(e.PID)
	}
	if e.Proxy != "" {
		who += ", proxy " + e.Proxy
	} else {
		who += ", still starting"
	}
	return fmt.Sprintf("%s: a stack is already running here (%s); stop it or use --state DIR", e.State, who)
}

// maxLockRead bounds the reads of the lock file and of the holder's up.json.
const maxLockRead = 1 << 20

// lockState takes the exclusive lock on state's lock file without waiting, and writes this
// process's pid in it. The lock lasts until the returned file is closed or the process ends;
// the caller keeps the file referenced until then. When another process holds it, the error is
// a *BusyError, and nothing in state has been changed.
func lockState(state string) (*os.File, error) {
	path := filepath.Join(state, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the state directory's lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, busy(state)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
		if err == nil {
			err = f.Sync()
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the pid in %s: %w", path, err)
	}
	return f, nil
}

// busy describes the stack that holds state's lock: its pid from the lock file, its proxy from
// its up.json when that names the same pid.
func busy(state string) *BusyError {
	e := &BusyError{State: state}
	if data, err := atomicfile.ReadFile(filepath.Join(state, LockFile), maxLockRead); err == nil {
		e.PID, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	if data, err := atomicfile.ReadFile(filepath.Join(state, UpFile), maxLockRead); err == nil {
		var up Up
		if json.Unmarshal(data, &up) == nil && (e.PID == 0 || up.PIDs["lox"] == e.PID) {
			e.Proxy = up.Gate
			if e.PID == 0 {
				e.PID = up.PIDs["lox"]
			}
		}
	}
	return e
}

// removeOwnUp removes state's up.json when this process wrote it, and leaves any other.
func removeOwnUp(state string) {
	path := filepath.Join(state, UpFile)
	data, err := atomicfile.ReadFile(path, maxLockRead)
	if err != nil {
		return
	}
	var up Up
	if json.Unmarshal(data, &up) == nil && up.PIDs["lox"] == os.Getpid() {
		os.Remove(path)
	}
}
