package doctor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
)

// GatherLocal examines the local stack (lox run) whose state directory is state.
func GatherLocal(ctx context.Context, state string) *Facts {
	f := &Facts{Mode: "local", Now: time.Now()}
	caDir := filepath.Join(state, "ca")
	s := Setup{CACert: filepath.Join(caDir, "ca.pem"), CAKey: filepath.Join(caDir, "ca-key.pem"), SignerUID: -1}
	var up stack.Up
	data, err := os.ReadFile(filepath.Join(state, stack.UpFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		f.Stack = fmt.Sprintf("no stack is running with the state directory %s (it has no %s); fix: lox run --state %s", state, stack.UpFile, state)
	case err != nil:
		f.Stack = err.Error()
	default:
		if err := json.Unmarshal(data, &up); err != nil {
			f.Stack = fmt.Sprintf("%s: %v; fix: restart lox run", filepath.Join(state, stack.UpFile), err)
		}
	}
	if f.Stack != "" {
		f.CA = gatherCA(s)
		return f
	}
	f.StackVersion = up.Version
	f.Supervision = &SupervisionFacts{Started: up.Started, Logs: up.Logs, Restarts: up.Restarts}
	if up.CACert != "" {
		s.CACert = up.CACert
		s.CAKey = filepath.Join(filepath.Dir(up.CACert), "ca-key.pem")
	}
	if pid := up.PIDs["signer"]; pid > 0 {
		if uid, err := procUID(pid); err == nil {
			s.SignerUID = uid
		}
	}
	s.SignerSocket, s.ConsoleSocket, s.GateSocket = up.SignerSocket, up.ConsoleSocket, up.GateSocket
	s.Hub, s.HubToken = up.Hub, up.HubCLIToken
	s.Metrics = up.Metrics
	s.Proxy, s.ProxyCA, s.AuditDir = up.Gate, up.CACert, up.AuditDir
	s.SecretsFile = up.Secrets
	if os.Geteuid() == 0 {
		s.ProbeOther = Probe(up.SignerSocket, nobodyUID, nobodyUID)
	} else if fi, err := os.Stat(filepath.Dir(up.SignerSocket)); err == nil {
		s.NotProbed = fmt.Sprintf("the socket's directory %s has mode %04o (run the doctor as root to probe the signer with another uid)", filepath.Dir(up.SignerSocket), fi.Mode().Perm())
		s.NotProbedOK = fi.Mode().Perm()&0o077 == 0
	}
	Gather(ctx, s, f)
	if pid := up.PIDs["agent"]; pid > 0 {
		f.Enclosure = ProbeEnclosure(pid, up.Enclosure)
	} else {
		f.Enclosure = &EnclosureFacts{}
	}
	enclosed := ""
	if up.Enclosure != nil {
		enclosed = up.Enclosure.Gate
	}
	skip := lineage("/proc", os.Getpid())
	for _, pid := range up.PIDs {
		skip = append(skip, pid)
	}
	f.RootAgents = GatherRootAgents("/proc", gateAddrs(up.Listen, enclosed), skip, up.PIDs["agent"])
	return f
}

// procUID is the real uid a process runs as.
func procUID(pid int) (int, error) {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				return strconv.Atoi(fs[0])
			}
		}
	}
	return 0, errors.New("no Uid line")
}
