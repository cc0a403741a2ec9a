package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/cmdmain"
)

// healthz answers the container's healthcheck (console health): 200 once the console serves an
// approved policy, which the gate then fetches; 503 before. It says nothing else: the hub's
// port may be open to a LAN.
func healthz(w http.ResponseWriter, serving bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !serving {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "no approved policy yet")
		return
	}
	fmt.Fprintln(w, "ok")
}

// runHealth is console health: exit 0 when the console at the hub address serves an approved
// policy (GET /healthz), 1 when not. The compose healthcheck runs it inside the console's
// container, so the gate starts only once there is a policy to fetch.
func runHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("console health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hub := fs.String("hub", "http://127.0.0.1:3131", "the hub's `URL` (the console's -hub-listen, as this process reaches it)")
	if code, ok := cmdmain.Parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "console health: unexpected argument %q; it takes -hub URL only\n", fs.Arg(0))
		return 2
	}
	if !strings.HasPrefix(*hub, "http://") && !strings.HasPrefix(*hub, "https://") {
		fmt.Fprintf(stderr, "console health: -hub %q: write it as http://host:port\n", *hub)
		return 2
	}
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(*hub, "/") + "/healthz")
	if err != nil {
		fmt.Fprintf(stderr, "console health: the hub at %s does not answer: %v\n", *hub, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "console health: %s answered %d: %s\n", *hub, resp.StatusCode, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "console health: %s serves an approved policy\n", *hub)
	return 0
}
