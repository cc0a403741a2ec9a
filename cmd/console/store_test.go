package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// The hub's store: the file store by default, PostgreSQL with -hub-store postgres and its DSN
// from a file or the environment, never the command line.
func TestHubStoreFlags(t *testing.T) {
	base := []string{"-policy", "p.toml", "-socket", "s", "-audit", "a", "-hub-listen", "127.0.0.1:0", "-hub-key", "k", "-hub-gate-token", "g"}
	tests := []struct {
		name  string
		args  []string
		store string
		err   string
	}{
		{"the file store by default", []string{"-hub-state", "h.json"}, "file", ""},
		{"the file store needs its file", nil, "", "-hub-listen needs -hub-state (or -hub-store postgres)"},
		{"postgres", []string{"-hub-store", "postgres", "-hub-dsn-file", "dsn"}, "postgres", ""},
		{"postgres takes no state file", []string{"-hub-store", "postgres", "-hub-state", "h.json"}, "", "drop -hub-state"},
		{"an unknown store", []string{"-hub-store", "redis"}, "", `-hub-store "redis": use file or postgres`},
		{"no DSN flag", []string{"-hub-store", "postgres", "-hub-dsn", "postgres://u:pw@h/db"}, "", "flag provided but not defined: -hub-dsn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(append(append([]string{}, base...), tc.args...), io.Discard)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || o.hubStore != tc.store {
				t.Fatalf("store %q, %v; want %q", o.hubStore, err, tc.store)
			}
		})
	}
	// -hub-store postgres with no DSN anywhere says where it goes.
	t.Setenv(hubDSNEnv, "")
	o := &options{hubStore: "postgres"}
	if _, err := openHubStore(context.Background(), o, nil); err == nil || !strings.Contains(err.Error(), "-hub-dsn-file FILE or "+hubDSNEnv) {
		t.Fatalf("no DSN: %v", err)
	}
	// A DSN that does not parse is refused without its password.
	dsn := filepath.Join(t.TempDir(), "dsn")
	os.WriteFile(dsn, []byte("postgres://u:hunter2@[::1\n"), 0o600)
	o.hubDSNFile = dsn
	if _, err := openHubStore(context.Background(), o, nil); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a bad DSN: %v", err)
	}
	// The file store is the default.
	o = &options{hubStore: "file", hubState: filepath.Join(t.TempDir(), "hub.json")}
	s, err := openHubStore(context.Background(), o, nil)
	if _, ok := s.(*hub.FileStore); !ok || err != nil {
		t.Fatalf("the default store: %T %v", s, err)
	}
}
