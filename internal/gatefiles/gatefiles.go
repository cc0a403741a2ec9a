// Package gatefiles reads the gate's own files: the secrets it injects and the
// containers' Claude credentials. Neither is ever served by the console or written to up.json.
package gatefiles

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"syscall"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// maxSize bounds a secret file.
const maxSize = 1 << 20

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// read reads a file that must not be readable by group or others.
func read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: others can read it; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	return atomicfile.Read(f, path, maxSize)
}

// file is the secrets file:
//
//	version = 1
//	[secrets]
//	github = "ghp_..."
type file struct {
	Version int               `toml:"version"`
	Secrets map[string]string `toml:"secrets"`
}

// Secrets reads the gate's secrets file. Errors name the file, the line and the fix, never a
// value.
func Secrets(path string) (map[string]string, error) {
	data, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	return parseSecrets(path, data)
}

// parseSecrets decodes and checks a secrets file's content; path names it in errors.
func parseSecrets(path string, data []byte) (map[string]string, error) {
	var f file
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d: the file is not valid TOML (write name = \"value\" lines under [secrets])", path, pe.Position.Line)
		}
		return nil, fmt.Errorf("%s: the file is not of the secrets file's shape: version = 1, then [secrets] with name = \"value\" lines", path)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return nil, fmt.Errorf("%s: unknown key %q; the file holds version = 1 and a [secrets] table", path, u[0].String())
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("%s: version = 1 is required", path)
	}
	names := make([]string, 0, len(f.Secrets))
	for name := range f.Secrets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("%s: secret name %q: use letters, digits, '.', '_' and '-'", path, name)
		}
		if len(f.Secrets[name]) < secrets.MinInjected {
			return nil, fmt.Errorf("%s: secret %q is shorter than %d bytes: too short to find reliably if an agent ever sends it; use the real credential", path, name, secrets.MinInjected)
		}
	}
	return f.Secrets, nil
}

// Put sets the secret name to value in the secrets file at path, keeping its other entries, and
// writes it atomically with mode 0600. A missing file is created; the new file keeps the owner
// of the one it replaces or, when new, takes its directory's (so that root can write the gate's
// file). The content is checked with Secrets' rules before anything is written. Errors never
// hold the value.
func Put(path, name, value string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("secret name %q: use 1 to 64 letters, digits, '.', '_' and '-'", name)
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("secret %q is not UTF-8 text", name)
	}
	f := file{Version: 1, Secrets: map[string]string{}}
	owner, err := os.Stat(path)
	switch {
	case err == nil:
		if f.Secrets, err = Secrets(path); err != nil {
			return err
		}
		if f.Secrets == nil {
			f.Secrets = map[string]string{}
		}
	case errors.Is(err, fs.ErrNotExist):
		if owner, err = os.Stat(filepath.Dir(path)); err != nil {
			return fmt.Errorf("secrets file: %w", err)
		}
	default:
		return fmt.Errorf("secrets file: %w", err)
	}
	f.Secrets[name] = value
	var buf bytes.Buffer
	enc := toml.NewEncoder(&buf)
	enc.Indent = ""
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("secrets file %s: encoding it: %v", path, err)
	}
	if _, err := parseSecrets(path, buf.Bytes()); err != nil {
		return err
	}
	// Written beside the file, given its owner, then renamed over it: the gate, which reads it
	// again on a change, sees the old file or the new one, always one it may read.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".put")
	if err := atomicfile.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return err
	}
	if st, ok := owner.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (int(st.Uid) != 0 || int(st.Gid) != 0) {
		if err := os.Chown(tmp, int(st.Uid), int(st.Gid)); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("secrets file: %w", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("secrets file: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Claude reads the containers' Claude credentials file (docs/claude-api.md).
func Claude(path string) (*claudeapi.Credentials, error) {
	data, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("Claude credentials file: %w", err)
	}
	return claudeapi.ParseCredentials(path, data)
}

// Checks reads the secrets file (may be "") and the Claude credentials file the policy names,
// and builds the checks that need them. A file that does not load is in the result (the checks
// that need it refuse) and in problems; it never lets anything through.
func Checks(p *policy.Policy, secretsPath string) (in *judge.Checks, problems []error) {
	var injected map[string]string
	secretsErr := judge.ErrNoSecretsFile
	if secretsPath != "" {
		injected, secretsErr = Secrets(secretsPath)
		if secretsErr != nil {
			problems = append(problems, secretsErr)
		}
	}
	var claude *claudeapi.Credentials
	var claudeErr error
	if p.ClaudeCredentials != "" {
		claude, claudeErr = Claude(p.ClaudeCredentials)
		if claudeErr != nil {
			problems = append(problems, claudeErr)
		}
	}
	in, err := judge.NewChecks(p, injected, secretsErr, claude, claudeErr)
	if err != nil {
		// The detector refuses a secret: the checks that cannot run refuse what they would have
		// checked (judge.Decide), never let it through.
		problems = append(problems, err)
	}
	return in, problems
}
