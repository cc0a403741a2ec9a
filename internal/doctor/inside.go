package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"

	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/layout"
)

// ProbeSigner connects to the signer at socket as uid:gid (when they differ from this process's,
// it must run as root) and asks for GET /health. refused reports that the caller got no answer
// it could use; how says what happened. The connection is made on a thread of its own that takes
// the other uid and then ends: the rest of the process keeps its credentials.
func ProbeSigner(socket string, uid, gid int) (refused bool, how string, err error) {
	type result struct {
		refused bool
		how     string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, with its changed credentials, ends with the goroutine.
		runtime.LockOSThread()
		if uid != os.Geteuid() || gid != os.Getegid() {
			if err := setThreadCreds(uid, gid); err != nil {
				done <- result{err: fmt.Errorf("cannot take uid %d on a thread: %w", uid, err)}
				return
			}
		}
		r, h, err := probeHealth(socket)
		done <- result{refused: r, how: h, err: err}
	}()
	r := <-done
	return r.refused, r.how, r.err
}

// setThreadCreds changes the calling thread's credentials only (raw system calls, which Go's
// syscall.Setuid would broadcast to every thread).
func setThreadCreds(uid, gid int) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return e
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return e
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return e
	}
	return nil
}

// probeHealth speaks HTTP/1.0 on a blocking unix socket from the calling thread, so that the
// peer credentials the signer reads are this thread's.
func probeHealth(socket string) (refused bool, how string, err error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, "", err
	}
	defer syscall.Close(fd)
	tv := syscall.Timeval{Sec: 5}
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
	if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: socket}); err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return true, "the file system refuses it the socket: " + err.Error(), nil
		}
		return false, "", fmt.Errorf("the signer does not listen on %s (%w)", socket, err)
	}
	if _, err := syscall.Write(fd, []byte("GET /health HTTP/1.0\r\nHost: signer\r\n\r\n")); err != nil {
		return true, "the signer closed the connection", nil
	}
	buf := make([]byte, 512)
	n, err := syscall.Read(fd, buf)
	switch {
	case err != nil && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)):
		return false, "", errors.New("the signer did not answer within 5s")
	case err != nil || n <= 0:
		return true, "the signer closed the connection", nil
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	if strings.HasPrefix(line, "HTTP/1.") && strings.Contains(line, " 200 ") {
		return false, "GET /health answered 200", nil
	}
	return true, "GET /health answered " + display.Line(line, 80), nil
}

// Probe returns a Setup.ProbeOther that probes socket as uid:gid.
func Probe(socket string, uid, gid int) func(ctx context.Context) (int, bool, string, error) {
	return func(context.Context) (int, bool, string, error) {
		refused, how, err := ProbeSigner(socket, uid, gid)
		return uid, refused, how, err
	}
}

// Compose volume paths, as doctor inside-compose mounts them.
const (
	insideCA      = "/vol/ca"
	insideCAPub   = "/vol/ca-public"
	insideSockets = "/run/lockhttp"
	insideAudit   = "/vol/audit"
	insideConsole = "/vol/console"
	insideHub     = "http://console:3131"
	nobodyUID     = 65534
)

// GatherInside runs in a container with the project's volumes, as root: it reads what only root
// reads here (the CA key's mode and owner, the hub token) and probes the signer as another uid
// of the lockhttp group; then self (this executable) runs again as the gate's uid for the
// sockets, which serve only it (doctor inside-compose --as-gate).
func GatherInside(ctx context.Context, self, auditID, secretsFile string) *Facts {
	f := &Facts{Mode: "compose", Now: time.Now()}
	s := insideSetup(auditID)
	f.CA = gatherCA(s)
	f.Hub = gatherHub(ctx, s.Hub, s.HubToken)
	uid, refused, how, perr := Probe(s.SignerSocket, nobodyUID, layout.Group)(ctx)
	cmd := exec.CommandContext(ctx, self, "doctor", "inside-compose", "--as-gate", "--audit-id", auditID, "--secrets", secretsFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: layout.GateUID, Gid: layout.Group, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var g Facts
	if err == nil {
		err = json.Unmarshal(out, &g)
	}
	if err != nil {
		f.Stack = fmt.Sprintf("the doctor as the gate's uid (%d) failed: %v %s", layout.GateUID, err, display.Line(strings.TrimSpace(stderr.String()), 300))
		return f
	}
	f.Signer, f.Console, f.Gate, f.Audit, f.Secrets = g.Signer, g.Console, g.Gate, g.Audit, g.Secrets
	if f.Signer != nil {
		if perr != nil {
			f.Signer.NotProbed = perr.Error()
		} else {
			f.Signer.OtherProbed, f.Signer.OtherUID, f.Signer.OtherRefused, f.Signer.OtherHow = true, uid, refused, how
		}
	}
	return f
}

// GatherAsGate is the part of GatherInside that runs as the gate's uid: the sockets and the
// audit.
func GatherAsGate(ctx context.Context, auditID, secretsFile string) *Facts {
	f := &Facts{Mode: "compose", Now: time.Now()}
	s := insideSetup(auditID)
	s.SecretsFile = secretsFile
	s.CACert, s.Hub = "", ""
	Gather(ctx, s, f)
	return f
}

func insideSetup(auditID string) Setup {
	return Setup{
		CACert: filepath.Join(insideCAPub, "ca.pem"), CAKey: filepath.Join(insideCA, "ca-key.pem"), SignerUID: layout.SignerUID,
		SignerSocket: filepath.Join(insideSockets, "signer.sock"), ConsoleSocket: filepath.Join(insideSockets, "console.sock"),
		GateSocket: filepath.Join(insideSockets, "gate.sock"), Hub: insideHub, HubToken: filepath.Join(insideConsole, "cli.token"),
		AuditDir: insideAudit, AuditID: auditID,
	}
}
