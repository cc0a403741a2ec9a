package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

func TestHealth(t *testing.T) {
	serving := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { healthz(w, true) }))
	defer serving.Close()
	waiting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { healthz(w, false) }))
	defer waiting.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"an approved policy", []string{"-hub", serving.URL}, 0, "serves an approved policy"},
		{"no policy yet", []string{"-hub", waiting.URL}, 1, "answered 503: no approved policy yet"},
		{"no hub", []string{"-hub", gone.URL}, 1, "does not answer"},
		{"not a URL", []string{"-hub", "127.0.0.1:3131"}, 2, "write it as http://host:port"},
		{"an argument", []string{"now"}, 2, `unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out testkit.Buffer
			code := run(append([]string{"health"}, tc.args...), &out, &out)
			if code != tc.code || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, want %d; output %q lacks %q", code, tc.code, out.String(), tc.want)
			}
		})
	}
}
