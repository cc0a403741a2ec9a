package stack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/enclosure"
	"github.com/lockhttp/lockhttp/internal/layout"
)

// DefaultAgentUID is the uid `lox run --` gives the agent without --agent-uid: a uid of the
// agent's own, none of the compose setup's (gate 10003, signer 10004, console 10021, group
// 10000), and on most systems nobody's login.
const DefaultAgentUID = 10099

// agentGrace is how long the agent has to exit after SIGTERM before its processes are killed.
const agentGrace = 10 * time.Second

// Agent is the command `lox run -- COMMAND` starts once the stack is up, under a uid of its own
// so that it cannot read the state directory's tokens and keys.
type Agent struct {
	// Argv is the command and its arguments; Argv[0] is looked up in lox's PATH.
	Argv []string
	// UID is the agent's uid and gid, with no supplementary groups. Never 0, the operator's or a
	// compose service's (CheckAgentUID).
	UID int
	// Name is the agent's name in the proxy URL, which the audit records. Empty: Argv[0]'s base
	// name when it is a valid name (CheckAgentName), else "agent".
	Name string
	// Dir is the agent's working directory and HOME. A missing Dir is created, the agent's; an
	// existing one must be the agent's already. Empty: a fresh directory under os.TempDir(),
	// kept when lox exits.
	Dir string
	// Pass names variables of lox's environment the agent gets too (an API key, say). Empty:
	// the agent gets only PATH, TERM, COLORTERM, LANG, LC_* and TZ, and what lox sets.
	Pass []string
	// Set are NAME=VALUE variables lox gives the agent (ANTHROPIC_API_KEY's placeholder with
	// Options.ClaudeKeyFile); they replace a passed variable of the same name. Empty: none.
	Set []string
	// Stdin is the command's standard input; nil: /dev/null. Its output goes to Options.Stdout
	// and Options.Stderr.
	Stdin io.Reader
	// Signals are the signals lox receives. Before the command starts, any but SIGWINCH stops
	// the stack; then each is sent to the command's process group, and SIGTERM or SIGHUP kill
	// it agentGrace later if it has not exited. nil: none.
	Signals <-chan os.Signal
}

// ExitError is Run's error when an Agent's command did not succeed. Code is lox's exit status:
// the command's, 128 plus the signal's number when a signal ended it, 126 when it could not be
// executed and 127 when it was not found. Err, when set, says why the command did not run.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return fmt.Sprintf("the command exited with status %d", e.Code)
}

func (e *ExitError) Unwrap() error { return e.Err }

// OperatorUIDs are the uids of whoever runs lox: its real and effective uid and, under sudo,
// SUDO_UID. The agent never has one of them.
func OperatorUIDs() []int {
	uids := []int{os.Getuid(), os.Geteuid()}
	if n, err := strconv.Atoi(os.Getenv("SUDO_UID")); err == nil {
		uids = append(uids, n)
	}
	return uids
}

// CheckAgentUID refuses a uid the agent must not have: root, one of operators, a compose
// service's, nobody, or a number that is not a uid.
func CheckAgentUID(uid int, operators []int) error {
	own := fmt.Sprintf("use a uid of the agent's own, such as the default %d", DefaultAgentUID)
	switch {
	case uid == 0:
		return fmt.Errorf("--agent-uid 0 is root: the agent would hold every token and key; %s", own)
	case uid < 0 || uid > 1<<32-2:
		return fmt.Errorf("--agent-uid %d is not a uid (1 to 4294967294)", uid)
	case uid == layout.GateUID, uid == layout.SignerUID, uid == layout.ConsoleUID:
		return fmt.Errorf("--agent-uid %d is a lockhttp service's in the compose setup; %s", uid, own)
	case uid == layout.Group:
		return fmt.Errorf("--agent-uid %d would make the agent's group the compose setup's lockhttp group; %s", uid, own)
	case uid == 65534:
		return fmt.Errorf("--agent-uid 65534 is nobody, which other services share; %s", own)
	}
	for _, op := range operators {
		if uid == op {
			return fmt.Errorf("--agent-uid %d is the operator's (lox runs as it): the agent could read the stack's tokens and keys and approve its own tickets; %s", uid, own)
		}
	}
	return nil
}

var agentNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckAgentName refuses a name that cannot be the user name of the proxy URL as it is.
func CheckAgentName(name string) error {
	if !agentNameRE.MatchString(name) {
		return fmt.Errorf("--agent-name %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", display.Line(name, 80))
	}
	return nil
}

// agentRun is an Agent being prepared, run and cleaned up after.
type agentRun struct {
	a      *Agent
	gid    int
	stderr io.Writer
	root   string // lox's directory for the agent: ca.pem, ca-bundle.pem, work/ by default
	dir    string // the working directory and HOME
	caPEM  string
	bundle string

	cmd      *exec.Cmd
	pid      atomic.Int64 // the command's pid (and process group) once started
	done     chan struct{}
	waitErr  error // set before done closes
	killOnce sync.Once
	tty      *syscall.Termios // the terminal's modes when the command started, to restore

	enc   *enclosure.Enclosure // the agent's network enclosure (enclose), closed by cleanup
	ports []uint16             // the TCP ports redirected to the gate, from the approved policy
}

// checkAgent refuses to start an agent that could reach the stack's secrets, before anything
// is started: lox must be able to switch uids, the uid must be the agent's alone, the state
// directory shut to it, and the working directory its own and outside the state directory.
func checkAgent(a *Agent, state string, stderr io.Writer) (*agentRun, error) {
	if len(a.Argv) == 0 {
		return nil, errors.New("lox run --: no command")
	}
	if err := CheckAgentUID(a.UID, OperatorUIDs()); err != nil {
		return nil, err
	}
	if err := privileged(); err != nil {
		return nil, err
	}
	if pid, name, ok := uidInUse(a.UID); ok {
		return nil, fmt.Errorf("uid %d already runs process %d (%s): the agent must have its uid to itself (a process left by an earlier agent? stop it), or choose another with --agent-uid",
			a.UID, pid, display.Line(name, 40))
	}
	if err := checkStateDir(state, a.UID, a.UID); err != nil {
		return nil, err
	}
	r := &agentRun{a: a, gid: a.UID, stderr: stderr, done: make(chan struct{})}
	if a.Dir != "" {
		dir, err := filepath.Abs(a.Dir)
		if err != nil {
			return nil, err
		}
		if related(dir, state) {
			return nil, fmt.Errorf("--agent-dir %s and the state directory %s are one inside the other: the agent must not reach the state directory; choose another --agent-dir", dir, state)
		}
		r.dir = dir
	}
	if a.Name == "" {
		a.Name = "agent"
		if base := filepath.Base(a.Argv[0]); CheckAgentName(base) == nil {
			a.Name = base
		}
	}
	if err := CheckAgentName(a.Name); err != nil {
		return nil, err
	}
	for _, n := range a.Pass {
		if err := CheckPassName(n); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// prepare makes the agent's directories and its copies of the CA: ROOT (lox's, 0711) holds
// ca.pem and ca-bundle.pem (0644), and work/ (the agent's, 0700) when no Dir was given.
func (r *agentRun) prepare(caCert string) error {
	root, err := os.MkdirTemp("", "lox-agent-")
	if err != nil {
		return fmt.Errorf("the agent's directory: %w", err)
	}
	r.root = root
	if err := os.Chmod(root, 0o711); err != nil {
		return err
	}
	r.caPEM, r.bundle = filepath.Join(root, "ca.pem"), filepath.Join(root, BundleFile)
	ca, err := atomicfile.ReadFile(caCert, 1<<20)
	if err != nil {
		return fmt.Errorf("the CA certificate: %w", err)
	}
	if err := os.WriteFile(r.caPEM, ca, 0o644); err != nil {
		return err
	}
	if err := writeBundle(r.bundle, r.caPEM, r.stderr); err != nil {
		return err
	}
	if r.dir == "" {
		r.dir = filepath.Join(root, "work")
	}
	if err := agentDir(r.dir, r.a.UID, r.gid); err != nil {
		return err
	}
	for _, p := range []string{r.bundle, r.dir} {
		if blocked := unsearchable(p, r.a.UID, r.gid); blocked != "" {
			return fmt.Errorf("the agent (uid %d) cannot reach %s: %s is not searchable by it; make every directory above it searchable (chmod o+x), or set TMPDIR or --agent-dir elsewhere", r.a.UID, p, blocked)
		}
	}
	if u, err := user.LookupId(strconv.Itoa(r.a.UID)); err == nil {
		fmt.Fprintf(r.stderr, "lox: uid %d is the user %s: the agent can read and change whatever %s can\n", r.a.UID, display.Line(u.Username, 40), display.Line(u.Username, 40))
	}
	return nil
}

// agentDir creates dir for the agent (0700, its own), or checks that an existing dir is its.
func agentDir(dir string, uid, gid int) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("the agent's directory: %w", err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.Remove(dir)
			return fmt.Errorf("the agent's directory: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("the agent's directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--agent-dir %s is not a directory", dir)
	}
	if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != uid {
		return fmt.Errorf("--agent-dir %s belongs to uid %d, not the agent's (%d): the agent works in a directory of its own; chown -R %d %s, or leave out --agent-dir for a fresh one",
			dir, owner, uid, uid, dir)
	}
	return nil
}

// start starts the command as the agent's uid, in a session and process group of its own (no
// controlling terminal: it cannot push keystrokes into the operator's with TIOCSTI), with
// lox's standard streams, killed if lox dies, inside the agent's network enclosure (never
// without one).
func (r *agentRun) start(proxyURL string, stdout, stderr io.Writer) error {
	if r.enc == nil {
		return &ExitError{Code: 125, Err: errors.New("the agent's network enclosure is not there: lox never starts the agent without it")}
	}
	cmd := exec.Command(r.a.Argv[0], r.a.Argv[1:]...)
	cmd.Dir = r.dir
	cmd.Env = agentEnv(os.Environ(), r.a.Pass, r.a.Set, AgentVars(proxyURL, r.caPEM, r.bundle), r.dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.a.Stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: uint32(r.a.UID), Gid: uint32(r.gid), Groups: []uint32{}},
	}
	if f, ok := r.a.Stdin.(*os.File); ok {
		r.tty = termios(f)
	}
	wait, err := r.enc.Start(cmd)
	if err != nil {
		if errors.As(err, new(*enclosure.SetupError)) {
			return &ExitError{Code: 125, Err: err}
		}
		return r.startError(err)
	}
	r.cmd = cmd
	r.pid.Store(int64(cmd.Process.Pid))
	go func() {
		r.waitErr = <-wait
		close(r.done)
	}()
	return nil
}

// startError is the ExitError of a command that did not start: 127 not found, 126 otherwise,
// with what the agent's uid could not reach.
func (r *agentRun) startError(err error) error {
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = 127
	}
	msg := fmt.Sprintf("starting %s as uid %d: %v", display.Line(r.a.Argv[0], 80), r.a.UID, err)
	if errors.Is(err, fs.ErrPermission) {
		if p, lerr := exec.LookPath(r.a.Argv[0]); lerr == nil {
			if blocked := unsearchable(filepath.Dir(p), r.a.UID, r.gid); blocked != "" {
				msg += fmt.Sprintf(" (%s is not searchable by the agent's uid: put the command where it can reach it)", blocked)
			}
		}
	}
	return &ExitError{Code: code, Err: errors.New(msg)}
}

// watch handles lox's signals until quit closes: before the command runs, a signal other than
// SIGWINCH calls cancel; then each goes to the command's process group.
func (r *agentRun) watch(sigs <-chan os.Signal, cancel func(), quit <-chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case s, ok := <-sigs:
			if !ok {
				return
			}
			pid := int(r.pid.Load())
			if pid == 0 {
				if s != syscall.SIGWINCH {
					cancel()
				}
				continue
			}
			if sig, ok := s.(syscall.Signal); ok {
				syscall.Kill(-pid, sig)
				if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
					r.killAfter(agentGrace)
				}
			}
		}
	}
}

// killAfter kills the command's process group d from now unless it has exited; once.
func (r *agentRun) killAfter(d time.Duration) {
	r.killOnce.Do(func() {
		go func() {
			select {
			case <-r.done:
			case <-time.After(d):
				syscall.Kill(-int(r.pid.Load()), syscall.SIGKILL)
			}
		}()
	})
}

// terminate stops a running command: SIGTERM to its group, SIGKILL agentGrace later; it
// returns when the command has exited.
func (r *agentRun) terminate() {
	if r.cmd == nil {
		return
	}
	select {
	case <-r.done:
		return
	default:
	}
	syscall.Kill(-int(r.pid.Load()), syscall.SIGTERM)
	r.killAfter(agentGrace)
	<-r.done
}

// status is the command's exit status: its code, or 128 plus the signal that ended it.
func (r *agentRun) status() int {
	if r.cmd == nil || r.cmd.ProcessState == nil {
		return 125
	}
	if ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return r.cmd.ProcessState.ExitCode()
}

// sweep kills every process left running as the agent's uid (a background job, a daemon that
// left the group): checkAgent saw none before the command started, so each is the agent's.
// kill(-1) run as that uid reaches them all at once, forks included.
func (r *agentRun) sweep() {
	if r.cmd == nil {
		return
	}
	syscall.Kill(-int(r.pid.Load()), syscall.SIGKILL)
	k := exec.Command("/bin/sh", "-c", "kill -KILL -1 2>/dev/null; exit 0")
	k.Dir = "/"
	k.Env = []string{"PATH=/usr/bin:/bin"}
	k.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(r.a.UID), Gid: uint32(r.gid), Groups: []uint32{}}}
	if err := k.Run(); err != nil {
		fmt.Fprintf(r.stderr, "lox: could not kill what the agent left running as uid %d (%v); look for it with: ps -u %d\n", r.a.UID, err, r.a.UID)
	}
}

// cleanup gives the terminal back as it was (modes, and no input the agent left queued for the
// operator's shell), removes the network enclosure and the CA copies; the working directory
// stays.
func (r *agentRun) cleanup() {
	if r.enc != nil {
		if err := r.enc.Close(); err != nil {
			fmt.Fprintf(r.stderr, "lox: removing the agent's network enclosure: %v\n", err)
		}
	}
	if f, ok := r.a.Stdin.(*os.File); ok && r.tty != nil {
		ioctl(f.Fd(), syscall.TCSETS, uintptr(unsafe.Pointer(r.tty)))
		ioctl(f.Fd(), tcflsh, syscall.TCIFLUSH)
	}
	if r.root != "" {
		if r.cmd == nil && r.dir == filepath.Join(r.root, "work") {
			os.Remove(r.dir) // made for a command that never ran: empty
		}
		os.Remove(r.caPEM)
		os.Remove(r.bundle)
		os.Remove(r.root) // fails, as it should, when work/ is in it
	}
}

// tcflsh is TCFLSH of asm-generic (amd64, arm64), which package syscall does not name.
const tcflsh = 0x540B

func ioctl(fd, req, arg uintptr) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, req, arg); e != 0 {
		return e
	}
	return nil
}

// termios returns f's terminal modes, or nil when f is not a terminal.
func termios(f *os.File) *syscall.Termios {
	var t syscall.Termios
	if ioctl(f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t))) != nil {
		return nil
	}
	return &t
}

// neededCaps are the capabilities lox needs to run the agent as another uid, in a network
// enclosure: CAP_CHOWN (its directory), CAP_KILL (its processes), CAP_SETGID and CAP_SETUID,
// CAP_NET_ADMIN (its link and rules) and CAP_SYS_ADMIN (its namespaces).
const neededCaps = 1<<0 | 1<<5 | 1<<6 | 1<<7 | 1<<12 | 1<<21

// privileged refuses, naming the fix, when lox lacks neededCaps.
func privileged() error {
	data, _ := atomicfile.ReadFile("/proc/self/status", 64<<10)
	if capsHeld(data)&neededCaps == neededCaps {
		return nil
	}
	return errors.New("starting the agent as a uid of its own, in a network namespace of its own, needs root (CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_KILL, CAP_NET_ADMIN and CAP_SYS_ADMIN): run lox as root (sudo lox run [--agent-uid N] -- COMMAND), or run the agent in the compose setup (docs/deploy.md); lox never starts it as your own uid, which can read the stack's tokens and keys")
}

// capsHeld reads the effective capabilities from the text of /proc/PID/status.
func capsHeld(status []byte) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// uidInUse finds a process with uid as its real, effective, saved or file-system uid.
func uidInUse(uid int) (pid int, name string, ok bool) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := atomicfile.ReadFile(filepath.Join("/proc", e.Name(), "status"), 64<<10)
		if err != nil {
			continue
		}
		var comm string
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				comm = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				for _, f := range strings.Fields(v) {
					if f == strconv.Itoa(uid) {
						return p, comm, true
					}
				}
			}
		}
	}
	return 0, "", false
}

// checkStateDir refuses a state directory the agent could reach or move aside: open to group
// or others, or under a directory the agent's uid may change.
func checkStateDir(state string, uid, gid int) error {
	fi, err := os.Stat(state)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("the state directory %s is mode %04o: the agent (uid %d) could reach its tokens and keys; chmod 700 %s", state, perm, uid, state)
	}
	for d := state; ; d = filepath.Dir(d) {
		if changeable(d, uid, gid) {
			return fmt.Errorf("%s can be changed by the agent (uid %d), which could move the state directory %s aside; keep the state directory (--state) out of the agent's reach", d, uid, state)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// changeable says whether uid (with gid, no other groups) may rename or replace entries of dir.
func changeable(dir string, uid, gid int) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return false
	}
	st := fi.Sys().(*syscall.Stat_t)
	mode := fi.Mode()
	sticky := mode&os.ModeSticky != 0
	switch {
	case int(st.Uid) == uid:
		return true
	case int(st.Gid) == gid:
		return mode&0o020 != 0 && !sticky
	default:
		return mode&0o002 != 0 && !sticky
	}
}

// unsearchable returns the first directory from / down to path (path itself when it is a
// directory) that uid with gid may not search, by the mode bits; "" when there is none.
func unsearchable(path string, uid, gid int) string {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	var dirs []string
	for d := resolved; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, err := os.Stat(dirs[i])
		if err != nil || !fi.IsDir() {
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		bit := os.FileMode(0o001)
		switch {
		case int(st.Uid) == uid:
			bit = 0o100
		case int(st.Gid) == gid:
			bit = 0o010
		}
		if fi.Mode().Perm()&bit == 0 {
			return dirs[i]
		}
	}
	return ""
}

// related says whether a and b are the same directory or one is inside the other.
func related(a, b string) bool {
	if ra, err := filepath.EvalSymlinks(a); err == nil {
		a = ra
	}
	if rb, err := filepath.EvalSymlinks(b); err == nil {
		b = rb
	}
	inside := func(x, y string) bool {
		rel, err := filepath.Rel(y, x)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	return inside(a, b) || inside(b, a)
}
