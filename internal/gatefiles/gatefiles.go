// Package gatefiles reads the gate's own files: the secrets it injects and the
// containers' Claude credentials. Neither is ever served by the console or written to up.json.
package gatefiles

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"

	"github.com/BurntSushi/toml"

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
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSize)
	}
	return data, nil
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
