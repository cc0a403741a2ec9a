package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentCanRead: a file is readable by the agent's uid when every directory above it is
// searchable by it and its mode bits let it read (others, or the agent's group), or when the
// agent owns it; a file behind a directory the agent cannot search is not, whatever its mode.
func TestAgentCanRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to the agent's uid")
	}
	const uid, gid = 10099, 10099
	// t.TempDir's parent is 0700: a directory of its own, searchable by all.
	open, err := os.MkdirTemp("", "lox-agentfiles-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	os.Chmod(open, 0o755)
	shut := filepath.Join(open, "shut")
	os.Mkdir(shut, 0o700)
	write := func(dir, name string, mode os.FileMode, owner, group int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		if err := os.Chown(p, owner, group); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		path string
		want string // part of why; "": not readable
	}{
		{"0644 in an open directory", write(open, "a", 0o644, 0, 0), "readable by others"},
		{"0600 in an open directory", write(open, "b", 0o600, 0, 0), ""},
		{"0640 with the agent's group", write(open, "c", 0o640, 0, gid), "its group is the agent's gid"},
		{"0604 with the agent's group (group bits apply)", write(open, "d", 0o604, 0, gid), ""},
		{"the agent's own, 0600", write(open, "e", 0o600, uid, 0), "belongs to the agent's uid"},
		{"0644 behind a 0700 directory", write(shut, "f", 0o644, 0, 0), ""},
		{"missing", filepath.Join(open, "none"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := agentCanRead(c.path, uid, gid)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("agentCanRead = %q, want %q", got, c.want)
			}
		})
	}
	// A symbolic link in a shut directory to a readable file: the file is what counts.
	link := filepath.Join(shut, "link")
	os.Symlink(filepath.Join(open, "a"), link)
	if agentCanRead(link, uid, gid) == "" {
		t.Fatal("a link to a readable file hides it")
	}

	// checkAgentReads names the file, what it holds, and the fix; the token file a policy
	// names is checked too.
	tok := write(open, "ntfy.token", 0o644, 0, 0)
	pol := write(shut, "policy.toml", 0o600, 0, 0)
	os.WriteFile(pol, []byte("version = 1\n[[notify]]\nname = \"phone\"\nurl = \"https://ntfy.example.com/t\"\nkind = \"ntfy\"\nhuman = true\ntoken_file = \""+tok+"\"\n"), 0o600)
	err = checkAgentReads(Options{}, shut, pol, uid, gid)
	if err == nil || !strings.Contains(err.Error(), `the token file of the [[notify]] channel "phone" `+tok+" can be read by the agent (uid 10099)") ||
		!strings.Contains(err.Error(), "chmod 600 "+tok) {
		t.Fatalf("checkAgentReads: %v", err)
	}
	os.Chmod(tok, 0o600)
	if err := checkAgentReads(Options{}, shut, pol, uid, gid); err != nil {
		t.Fatalf("nothing readable: %v", err)
	}
	if err := checkAgentReads(Options{Secrets: filepath.Join(open, "a")}, shut, pol, uid, gid); err == nil ||
		!strings.Contains(err.Error(), "the gate's secrets file (--secrets) "+filepath.Join(open, "a")) {
		t.Fatalf("a readable secrets file: %v", err)
	}
	// The approved policy is what the console serves: its token files count, whatever the
	// policy file says now.
	other := write(open, "old.token", 0o640, 0, gid)
	approved := `{"version":1,"approved":{"version":"x","toml":"version = 1\n[[notify]]\nname = \"old\"\nurl = \"https://hooks.example.com/h\"\nkind = \"webhook\"\ntoken_file = \"` + other + `\"\n"}}`
	os.WriteFile(filepath.Join(shut, "console-state.json"), []byte(approved), 0o600)
	if err := checkAgentReads(Options{}, shut, pol, uid, gid); err == nil ||
		!strings.Contains(err.Error(), `the token file of the [[notify]] channel "old" `+other+" can be read by the agent (uid 10099): it is mode 0640 and its group is the agent's gid 10099") {
		t.Fatalf("the approved policy's token file: %v", err)
	}
}
