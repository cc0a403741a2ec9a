package layout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
)

// PolicyFile is the policy's name in the operator's policy directory.
const PolicyFile = "policy.toml"

// maxPolicy bounds the shipped policy SeedPolicy copies.
const maxPolicy = 1 << 20

// SeedPolicy checks the operator's policy directory (a host directory the console mounts
// read-only, so that an editor's write-and-rename is seen) and, on the first start, when it holds
// no policy.toml, copies the shipped policy into it, owned like the directory so that its owner
// edits it. It never changes a policy that is there: the console judges every edit. A directory
// or file the console (uid ConsoleUID, group Group) cannot read is an error naming the fix.
func SeedPolicy(dir, shipped string) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("the policy directory %s: %w; fix: mount the operator's policy directory there (LOCKHTTP_SITE/policy, docs/deploy.md)", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("the policy directory %s is not a directory: a single policy file mounted there keeps its old inode when an editor replaces it; fix: mount the directory that holds policy.toml (LOCKHTTP_SITE/policy, docs/deploy.md)", dir)
	}
	if !consoleCan(fi, 0o5) {
		return nil, fmt.Errorf("the policy directory %s has mode %04o and owner %s: the console (uid %d) cannot read it; fix: chmod 755 on that directory on the host", dir, fi.Mode().Perm(), owner(fi), ConsoleUID)
	}
	p := filepath.Join(dir, PolicyFile)
	pf, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data, err := atomicfile.ReadFile(shipped, maxPolicy)
		if err != nil {
			return nil, fmt.Errorf("the shipped policy: %w", err)
		}
		if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
			return nil, fmt.Errorf("copying the shipped policy to %s: %w", p, err)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil {
			if err := os.Chown(p, int(st.Uid), int(st.Gid)); err != nil {
				return nil, fmt.Errorf("%s: chown %d:%d: %w (run this as root)", p, st.Uid, st.Gid, err)
			}
		}
		return []string{fmt.Sprintf("%s: the shipped policy, copied on the first start (owned like %s: edit it there)", p, dir)}, nil
	case err != nil:
		return nil, err
	case !pf.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%s); fix: make it the policy file itself, not a link or a directory", p, pf.Mode().Type())
	case !consoleCan(pf, 0o4):
		return nil, fmt.Errorf("%s has mode %04o and owner %s: the console (uid %d) cannot read it; fix: chmod 644 %s on the host", p, pf.Mode().Perm(), owner(pf), ConsoleUID, PolicyFile)
	}
	return []string{fmt.Sprintf("%s: the operator's policy, left as it is", p)}, nil
}

// consoleCan reports whether the console's uid and group have the permission bits want (read 4,
// execute 1) on fi.
func consoleCan(fi fs.FileInfo, want fs.FileMode) bool {
	m := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case ok && st.Uid == ConsoleUID:
		return (m>>6)&want == want
	case ok && st.Gid == Group:
		return (m>>3)&want == want
	}
	return m&want == want
}

func owner(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	return "unknown"
}
