package enclosure

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// resolvedDir is systemd-resolved's directory: its varlink socket (io.systemd.Resolve, which
// nss-resolve asks) and the stub-resolv.conf that /etc/resolv.conf often points at.
const resolvedDir = "/run/systemd/resolve"

// maskedDirs hold the sockets of this machine's resolvers. A unix socket is not in a network
// namespace: through them a process in the enclosure could have names looked up outside it.
// The agent sees an empty directory in their place (systemd-resolved's holding a
// resolv.conf and stub-resolv.conf that name the gate).
var maskedDirs = []string{resolvedDir, "/run/nscd", "/var/run/nscd"}

// MaskedSockets are the host resolvers' sockets (systemd-resolved's, nscd's), which must not be
// there for the agent once their directories are masked.
var MaskedSockets = []string{resolvedDir + "/io.systemd.Resolve", "/run/nscd/socket", "/var/run/nscd/socket"}

// ResolvConf is the agent's /etc/resolv.conf: the gate is its only resolver.
func (e *Enclosure) ResolvConf() []byte {
	return []byte("# lox run --: the agent's resolver is the gate\nnameserver " + e.Gate.String() + "\n")
}

// Start starts cmd in the enclosure: in its network namespace and in a mount namespace of its
// own where /etc/resolv.conf names the gate and the host resolvers' sockets are masked. cmd is
// started from an OS thread that joined both namespaces, so the command is in them from its
// first instruction (its credentials, session and parent-death signal are cmd.SysProcAttr's);
// that thread waits for it and is thrown away after. The rules are read back once more first.
// The channel gets cmd.Wait's result. An error of the enclosure itself is a *SetupError; an
// error of cmd.Start is returned as it is.
func (e *Enclosure) Start(cmd *exec.Cmd) (<-chan error, error) {
	if e.closed {
		return nil, fail("starting the command", errors.New("the enclosure is closed"))
	}
	if e.ports == nil {
		return nil, fail("starting the command", errors.New("the rules have not been set and checked"))
	}
	if err := e.recheck(); err != nil {
		return nil, err
	}
	resolv, err := e.writeResolv()
	if err != nil {
		return nil, fail("the agent's resolv.conf", err)
	}
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, in the agent's namespaces, ends with this goroutine
		if err := e.enter(resolv); err != nil {
			started <- err
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// recheck reads both rule sets back again.
func (e *Enclosure) recheck() error {
	inside, err := e.cfg.Rules(int(e.ns))
	if err != nil {
		return fail("an nftables socket in the namespace", err)
	}
	if err := check(inside, agentRules(e.Gate, *e.ports), true); err != nil {
		return fail("checking the agent's rules", err)
	}
	host, err := e.cfg.Rules(-1)
	if err != nil {
		return fail("an nftables socket", err)
	}
	if err := check(host, hostRules(e.Link, e.Gate, *e.ports), false); err != nil {
		return fail("checking the host's rules for "+e.Link, err)
	}
	return nil
}

// writeResolv writes the agent's resolv.conf in a directory of the enclosure's own (removed by
// Close), for enter to bind-mount.
func (e *Enclosure) writeResolv() (string, error) {
	if e.dir == "" {
		d, err := os.MkdirTemp("", "lox-enclosure-")
		if err != nil {
			return "", err
		}
		e.dir = d
	}
	p := filepath.Join(e.dir, "resolv.conf")
	return p, os.WriteFile(p, e.ResolvConf(), 0o644)
}

// enter moves the calling thread, locked, into the enclosure: its network namespace, then a
// mount namespace of its own (nothing propagates back to the host) where the resolvers'
// directories are masked and resolv is bind-mounted, read-only, on /etc/resolv.conf. Each is
// checked.
func (e *Enclosure) enter(resolv string) error {
	if err := netns.Set(e.ns); err != nil {
		return fail("joining the namespace", err)
	}
	cur, err := netns.Get()
	if err != nil {
		return fail("joining the namespace", err)
	}
	same := cur.Equal(e.ns)
	cur.Close()
	if !same {
		return fail("joining the namespace", errors.New("the thread is not in it"))
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fail("a mount namespace", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("making the mount namespace private", err)
	}
	seen := map[string]bool{}
	for _, d := range maskedDirs {
		real, err := filepath.EvalSymlinks(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fail("masking "+d, err)
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		if err := unix.Mount("lockhttp-mask", real, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
			return fail("masking "+d, err)
		}
		if d == resolvedDir {
			for _, f := range []string{"resolv.conf", "stub-resolv.conf"} {
				if err := os.WriteFile(filepath.Join(real, f), e.ResolvConf(), 0o644); err != nil {
					return fail("masking "+d, err)
				}
			}
		}
	}
	if err := unix.Mount(resolv, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
		return fail("putting the gate in the agent's /etc/resolv.conf", err)
	}
	if err := unix.Mount("", "/etc/resolv.conf", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fail("making the agent's /etc/resolv.conf read-only", err)
	}
	if got, err := os.ReadFile("/etc/resolv.conf"); err != nil || !bytes.Equal(got, e.ResolvConf()) {
		return fail("checking the agent's /etc/resolv.conf", fmt.Errorf("it reads %q (%v)", got, err))
	}
	for _, s := range MaskedSockets {
		if _, err := os.Lstat(s); !errors.Is(err, fs.ErrNotExist) {
			return fail("masking the resolvers' sockets", fmt.Errorf("%s is still there for the agent (%v)", s, err))
		}
	}
	return nil
}

// Inside runs fn on a locked OS thread in the enclosure's network namespace. fn must open its
// sockets itself, on the calling goroutine: a goroutine it starts runs outside (so does Go's
// resolver, which looks names up in goroutines of its own).
func (e *Enclosure) Inside(fn func() error) error { return inNamespace(e.ns, fn) }

// InNamespace runs fn on a locked OS thread in the network namespace of the process pid, as
// Inside does.
func InNamespace(pid int, fn func() error) error {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("the network namespace of process %d: %w", pid, err)
	}
	defer ns.Close()
	return inNamespace(ns, fn)
}

func inNamespace(ns netns.NsHandle, fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("joining the network namespace: %w", err)
		}
		return fn()
	})
}
