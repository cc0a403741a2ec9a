package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// agentConsoleArgs tells the console the uid the agent runs as, so that it refuses what that
// uid could answer (a [[notify]] channel with insecure_loopback). None without an agent.
func agentConsoleArgs(a *Agent) []string {
	if a == nil {
		return nil
	}
	return []string{"-agent-uid", strconv.Itoa(a.UID)}
}

// secretFile is a file of the stack that the agent must not read, and what it holds.
type secretFile struct {
	what, path, holds string
}

// checkAgentReads refuses to start the agent when its uid could read a file that holds the
// stack's secrets: the policy file (the notification channels' receivers, a webhook's secret
// path, an ntfy topic), the gate's secrets file, the Claude key file, the upstream proxy's
// credentials file, and each [[notify]] channel's token file, of the policy file and of the
// policy the console approved (the one it serves, in the state directory). Each is checked as
// the agent's uid and gid would open it: every directory above it searchable, and the file's
// owner, group and mode bits. The error names the file and the fix.
func checkAgentReads(o Options, state, polPath string, uid, gid int) error {
	files := []secretFile{{"the policy file", polPath, "the notification channels' receivers (a webhook's secret path, an ntfy topic)"}}
	for _, f := range []secretFile{
		{"the gate's secrets file (--secrets)", o.Secrets, "the credentials the gate injects"},
		{"the Claude key file (--claude-key-file)", o.ClaudeKeyFile, "the Claude API key"},
		{"the upstream proxy's credentials file (--upstream-credentials-file)", o.UpstreamCredentialsFile, "the upstream proxy's password"},
	} {
		if f.path != "" {
			files = append(files, f)
		}
	}
	for _, text := range policyTexts(polPath, state) {
		if p, err := policy.Load(polPath, text); err == nil {
			for _, n := range p.Notify() {
				if n.TokenFile != "" {
					files = append(files, secretFile{fmt.Sprintf("the token file of the [[notify]] channel %q", n.Name), n.TokenFile, "the channel's access token"})
				}
			}
		}
	}
	for _, f := range files {
		if why := agentCanRead(f.path, uid, gid); why != "" {
			return fmt.Errorf("%s %s can be read by the agent (uid %d): %s; it holds %s. chmod 600 %s (owned by you, not the agent), or move it where the agent cannot reach, such as the state directory",
				f.what, f.path, uid, why, f.holds, f.path)
		}
	}
	return nil
}

// policyTexts are the policy file's text and the approved policy's (the console's state file in
// state), those that can be read.
func policyTexts(polPath, state string) [][]byte {
	var out [][]byte
	if data, err := atomicfile.ReadFile(polPath, 4<<20); err == nil {
		out = append(out, data)
	}
	if data, err := atomicfile.ReadFile(filepath.Join(state, "console-state.json"), 16<<20); err == nil {
		var st struct {
			Approved *struct {
				TOML string `json:"toml"`
			} `json:"approved"`
		}
		if json.Unmarshal(data, &st) == nil && st.Approved != nil {
			out = append(out, []byte(st.Approved.TOML))
		}
	}
	return out
}

// agentCanRead says why uid (with gid and no other groups) may read path, or "" when it may
// not: a directory above it that uid cannot search, or mode bits that give it no read. A file
// uid owns is readable whatever its mode: its owner may chmod it. A missing file is "".
func agentCanRead(path string, uid, gid int) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		resolved = abs
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return ""
	}
	if unsearchable(filepath.Dir(resolved), uid, gid) != "" {
		return ""
	}
	st := fi.Sys().(*syscall.Stat_t)
	perm := fi.Mode().Perm()
	switch {
	case int(st.Uid) == uid:
		return "it belongs to the agent's uid, which may change its mode (chown it to yourself too)"
	case int(st.Gid) == gid && perm&0o040 != 0:
		return fmt.Sprintf("it is mode %04o and its group is the agent's gid %d, and every directory above it is searchable by the agent", perm, gid)
	case int(st.Gid) != gid && perm&0o004 != 0:
		return fmt.Sprintf("it is mode %04o, readable by others, and every directory above it is searchable by the agent", perm)
	}
	return ""
}
