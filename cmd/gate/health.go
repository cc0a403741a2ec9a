package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// runHealth is gate health: exit 0 when the gate answers on its admin socket and decides with a
// policy; 1 when not (a gate without a policy refuses everything with E_NO_CONSOLE). The compose
// healthcheck runs it in the gate's container, as the gate's uid, so agents start once the gate
// decides.
func runHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gate health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "", "the gate's admin socket (its -admin; required)")
	if code, ok := cmdmain.Parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || *admin == "" {
		fmt.Fprintln(stderr, "usage: gate health -admin SOCKET (the gate's -admin socket)")
		return 2
	}
	resp, err := unixsock.Client(*admin, 3*time.Second).Get("http://unix/status")
	if err != nil {
		fmt.Fprintf(stderr, "gate health: no gate answers on %s: %v\n", *admin, errors.Unwrap(err))
		return 1
	}
	defer resp.Body.Close()
	var st gate.Status
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "gate health: %s answered %d: %.200s\n", *admin, resp.StatusCode, body)
		return 1
	}
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(stderr, "gate health: %s: %v\n", *admin, err)
		return 1
	}
	if st.PolicyVersion == "" {
		fmt.Fprintf(stderr, "gate health: the gate has no policy yet (console: %s)\n", orNone(st.ConsoleError))
		return 1
	}
	fmt.Fprintf(stdout, "gate health: deciding with policy %.12s\n", st.PolicyVersion)
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "no error"
	}
	return s
}
