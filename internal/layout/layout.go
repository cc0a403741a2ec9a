// Package layout prepares the volumes of the compose setup: each directory owned by the one
// service that writes it, readable by exactly the services that need it.
package layout

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
)

// The compose setup's numeric users and the group the lockhttp services share.
const (
	GateUID    = 10003
	SignerUID  = 10004
	ConsoleUID = 10021
	Group      = 10000
)

// dir is one volume directory: its owner, group and mode.
type dir struct {
	path     string
	uid, gid int
	mode     os.FileMode
	why      string
}

// Prepare creates (or corrects) the volume directories under root, the gate's hub token and the
// gate's secrets file:
//
//	ca/          signer's, 0700: the CA key never leaves it
//	ca-public/   signer's, 0755: ca.pem for the agents
//	sockets/     root:lockhttp, 2770: the unix sockets of signer, console and gate
//	console/     console's, 0700: policy state, hub state, console audit
//	hub/         console's, 0750 group lockhttp: the hub's public key and the gate's token
//	audit/       gate's, 0750 group lockhttp: the gate's audit (the console reads it)
//	secrets/     gate's, 0700: the gate's secrets file, secrets.toml (gate's, 0600)
//
// It runs as root once, before the services start; it never reads or changes a file's contents
// but the token and the secrets file (valid and empty: nothing to inject yet) it creates when
// missing. The CA's files, when there (a restore copies them in as root), become the signer's:
// ca-key.pem 0600, ca.pem 0644. Half a CA (a ca.pem without its key, or the reverse) is refused
// before anything is changed: the signer would make a new CA in its place only in an empty
// directory, and refuses it too, but the stack does not start at all this way.
func Prepare(root string) ([]string, error) {
	if err := signer.CheckFiles(filepath.Join(root, "ca")); err != nil && !errors.Is(err, signer.ErrNoCA) {
		return nil, fmt.Errorf("%w; in compose, replace it with: docker-compose run --rm --user %d:%d volumes ca init --replace --dir %s (docs/deploy.md, \"Replacing the CA\"); nothing was changed",
			err, SignerUID, Group, filepath.Join(root, "ca"))
	}
	dirs := []dir{
		{"ca", SignerUID, SignerUID, 0o700, "the CA key: the signer's alone"},
		{"ca-public", SignerUID, Group, 0o755, "ca.pem for the agents"},
		{"sockets", 0, Group, 0o770 | os.ModeSetgid, "the services' unix sockets"},
		{"console", ConsoleUID, ConsoleUID, 0o700, "the console's state"},
		{"hub", ConsoleUID, Group, 0o750, "the hub's public key and the gate's token"},
		{"audit", GateUID, Group, 0o750, "the gate's audit"},
		{"secrets", GateUID, GateUID, 0o700, "the gate's secrets file"},
	}
	var done []string
	for _, d := range dirs {
		p := filepath.Join(root, d.path)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return done, fmt.Errorf("%s (%s): %w", p, d.why, err)
		}
		if err := os.Chown(p, d.uid, d.gid); err != nil {
			return done, fmt.Errorf("%s: chown %d:%d: %w (run this as root)", p, d.uid, d.gid, err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return done, fmt.Errorf("%s: chmod: %w", p, err)
		}
		done = append(done, fmt.Sprintf("%s %d:%d %s (%s)", p, d.uid, d.gid, d.mode, d.why))
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{signer.KeyFile, 0o600}, {signer.CertFile, 0o644}} {
		p := filepath.Join(root, "ca", f.name)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return done, err
		}
		if !fi.Mode().IsRegular() {
			return done, fmt.Errorf("%s is not a regular file: put the CA's file itself there (a restore copies the file, not a link)", p)
		}
		if err := os.Chown(p, SignerUID, Group); err != nil {
			return done, fmt.Errorf("%s: chown %d:%d: %w (run this as root)", p, SignerUID, Group, err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return done, fmt.Errorf("%s: chmod: %w", p, err)
		}
		done = append(done, fmt.Sprintf("%s %d:%d %04o (the CA's %s, the signer's)", p, SignerUID, Group, f.mode, f.name))
	}
	// What a restore copied into the services' volumes (as root, or as whoever made the backup)
	// becomes the service's again: each file and directory in them, owned by the volume's
	// owner and the lockhttp group, its mode kept.
	for _, v := range []struct {
		path string
		uid  int
	}{{"console", ConsoleUID}, {"hub", ConsoleUID}, {"audit", GateUID}} {
		n, err := ownContents(filepath.Join(root, v.path), v.uid, Group)
		if err != nil {
			return done, err
		}
		if n > 0 {
			done = append(done, fmt.Sprintf("%s: %d files and directories given back to %d:%d (a restore copied them in)", filepath.Join(root, v.path), n, v.uid, Group))
		}
	}
	// The gate's token for the hub: readable by the console (which checks it) and the gate.
	tok := filepath.Join(root, "hub", "gate.token")
	if _, err := os.Stat(tok); errors.Is(err, os.ErrNotExist) {
		var b [32]byte
		rand.Read(b[:])
		if err := os.WriteFile(tok, []byte(base64.RawURLEncoding.EncodeToString(b[:])+"\n"), 0o440); err != nil {
			return done, err
		}
	}
	if err := os.Chown(tok, 0, Group); err != nil {
		return done, err
	}
	if err := os.Chmod(tok, 0o440); err != nil {
		return done, err
	}
	done = append(done, tok+" 0:10000 0440 (the gate's hub token)")
	// The gate's secrets file: the gate is started with it, and a named file that is missing
	// refuses every request, so it exists from the start, with nothing in it.
	sec := filepath.Join(root, SecretsFile)
	fi, err := os.Stat(sec)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(sec, []byte(EmptySecrets), 0o600); err != nil {
			return done, err
		}
		fi, err = os.Stat(sec)
	}
	if err != nil {
		return done, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	wrong := st == nil || st.Uid != GateUID || st.Gid != GateUID || fi.Mode().Perm() != 0o600
	if err := os.Chown(sec, GateUID, GateUID); err != nil {
		return done, err
	}
	if err := os.Chmod(sec, 0o600); err != nil {
		return done, err
	}
	if wrong {
		// The gate reads the file again when its time, mode or size changes: a new owner alone
		// (a file copied in as root with mode 0600) it would not notice.
		now := time.Now()
		if err := os.Chtimes(sec, now, now); err != nil {
			return done, err
		}
	}
	done = append(done, fmt.Sprintf("%s %d:%d 0600 (the gate's secrets file)", sec, GateUID, GateUID))
	return done, nil
}

// ownContents gives what dir holds (not dir itself) to uid:gid where it belongs to another,
// links aside; it returns how many it changed.
func ownContents(dir string, uid, gid int) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir || d.Type()&os.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("%s: chown %d:%d: %w (run this as root)", p, uid, gid, err)
		}
		n++
		return nil
	})
	return n, err
}

// SecretsFile is the gate's secrets file, relative to the volumes' root.
const SecretsFile = "secrets/secrets.toml"

// EmptySecrets is the secrets file Prepare creates: valid, with no secret (docs/secrets.md).
const EmptySecrets = "# The gate's secrets file (docs/secrets.md): lockhttp secrets add NAME --secrets FILE < value\nversion = 1\n\n[secrets]\n"
