package audit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrBudget is reported (errors.Is) when a batch would take the audit directory past
// Options.Budget.
var ErrBudget = errors.New("audit: the audit directory has reached its size budget")

// budgetError is a batch refused by the budget.
type budgetError struct {
	dir          string
	budget, size int64
}

func (e *budgetError) Error() string {
	return fmt.Sprintf("audit: %s holds %d bytes, its budget is %d: nothing more is written; fix: move old day files out of it "+
		"(after lockhttp verify-log; keep them as the archive) or raise the gate's -audit-budget", e.dir, e.size, e.budget)
}

func (e *budgetError) Is(target error) bool { return target == ErrBudget }

// PublicReason is what the agent reads about it: fixed text, no path.
func (e *budgetError) PublicReason() string {
	return "the gate cannot write its audit: the audit directory has reached its size budget, so nothing goes out until the operator archives old audit files or raises the budget"
}

// fullError is a write or fsync that failed because the disk (or the user's quota) is full.
type fullError struct{ err error }

func (e *fullError) Error() string {
	return e.err.Error() + "; fix: the disk holding the audit is full: free space on it (move old day files to an archive, after lockhttp verify-log)"
}

func (e *fullError) Unwrap() error { return e.err }

// PublicReason is what the agent reads about it: fixed text, no path.
func (e *fullError) PublicReason() string {
	return "the gate cannot write its audit: the audit disk is full, so nothing goes out until space is freed"
}

// classify marks an error of a full disk as such, for Healthy's reader (the gate's refusal says
// why, the doctor says what to do).
func classify(err error) error {
	if err == nil {
		return nil
	}
	if fe := (*fullError)(nil); errors.As(err, &fe) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &fullError{err}
	}
	return err
}

// DiskFull reports whether err (from Write or Healthy) is a full disk or the budget.
func DiskFull(err error) bool {
	var fe *fullError
	return errors.As(err, &fe) || errors.Is(err, ErrBudget)
}

// scan counts the bytes of the directory's regular files (the committer's, and Open's).
func (w *Writer) scan() error {
	w.lastScan = w.now()
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return pathError("read", w.dir, err)
	}
	var n int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	w.size.Store(n)
	return nil
}

// Usage is how much the audit takes and may take, for the gate's status and the doctor.
type Usage struct {
	Dir    string `json:"dir"`
	Bytes  int64  `json:"bytes"`            // the directory's files
	Budget int64  `json:"budget,omitempty"` // Options.Budget; 0: none
	// Free and Total are the file system's bytes available to the gate and in all.
	Free  int64 `json:"disk_free"`
	Total int64 `json:"disk_total"`
	// Full reports that the last write failed for want of space (the disk or the budget).
	Full    bool  `json:"full,omitempty"`
	Records int64 `json:"records"` // records written since the gate started
	Syncs   int64 `json:"fsyncs"`  // fsyncs since the gate started
	// HeadWarning is what the gate found wrong with the signed head at its start (a spoiled
	// slot: HeadSlots), "" when nothing.
	HeadWarning string `json:"head_warning,omitempty"`
}

// Usage reports the directory's size, its budget and the disk's free space.
func (w *Writer) Usage() Usage {
	u := Usage{Dir: w.dir, Bytes: w.size.Load(), Budget: w.budget, Records: w.written.Load(), Syncs: w.syncs.Load(),
		Full: DiskFull(w.Healthy()), HeadWarning: w.headWarning}
	var st syscall.Statfs_t
	if syscall.Statfs(w.dir, &st) == nil {
		u.Free = int64(st.Bavail) * int64(st.Bsize)
		u.Total = int64(st.Blocks) * int64(st.Bsize)
	}
	return u
}

// SinkStatus is the state of the audit's database copy, for the gate's status and the doctor.
type SinkStatus struct {
	State  string `json:"state"` // "ok" or "down"
	Error  string `json:"error,omitempty"`
	Rows   int64  `json:"rows"`   // rows copied since the gate started
	Behind int64  `json:"behind"` // records on disk the copy does not have yet
}
