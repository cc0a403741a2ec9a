package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

func TestHealth(t *testing.T) {
	dir, err := os.MkdirTemp("", "gh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	serve := func(name string, st gate.Status) string {
		sock := filepath.Join(dir, name)
		l, err := unixsock.Listen(sock, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(st) })}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return sock
	}
	deciding := serve("a.sock", gate.Status{PolicyVersion: "0123456789abcdef"})
	waiting := serve("b.sock", gate.Status{ConsoleError: "dial unix /run/lockhttp/console.sock: connect: no such file or directory"})
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a policy", []string{"-admin", deciding}, 0, "deciding with policy 0123456789ab"},
		{"no policy yet", []string{"-admin", waiting}, 1, "no policy yet (console: dial unix"},
		{"no gate", []string{"-admin", filepath.Join(dir, "none.sock")}, 1, "no gate answers on"},
		{"no socket named", nil, 2, "usage: gate health -admin SOCKET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs testkit.Buffer
			// runHealth writes its OK line to stdout: the exit code and stderr carry the verdict.
			code := runHealth(tc.args, &errs, &errs)
			if code != tc.code || !strings.Contains(errs.String(), tc.want) {
				t.Errorf("exit %d, want %d; output %q lacks %q", code, tc.code, errs.String(), tc.want)
			}
		})
	}
}
