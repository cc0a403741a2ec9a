package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/hubclient"
)

// runCredentials is lox credentials: the Claude credentials humans bound to containers by
// approving the ASK about them, and the Claude logins the gate saw issued to them.
func runCredentials(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox credentials", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHubFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON array of the bindings, oldest first")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "lox credentials: unexpected argument %q; to remove one, lox unbind CONTAINER HASH\n", pos[0])
		return 2
	}
	f, err := hf.facade()
	if err != nil {
		fmt.Fprintln(stderr, "lox credentials:", err)
		return 1
	}
	cs, err := f.Credentials(context.Background())
	if err != nil {
		fmt.Fprintln(stderr, "lox credentials:", err)
		return 1
	}
	if *asJSON {
		if cs == nil {
			cs = []hubclient.Credential{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(cs)
		return 0
	}
	if len(cs) == 0 {
		fmt.Fprintln(stdout, "no Claude credential is bound to a container")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tSHA256\tBOUND BY\tTICKET\tAT")
	for _, c := range cs {
		by, ticket := c.By, c.Ticket
		if c.Issued != "" {
			// A login the gate saw issued: no ticket, the request whose answer issued it.
			by, ticket = c.By+" (issued by "+c.Issued+")", "request "+c.Request
		}
		fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\n", display.Escape(c.Container, false), display.Cut(display.Escape(c.Hash, false), 12),
			display.Escape(by, false), display.Escape(ticket, false), c.At.UTC().Format(time.RFC3339))
	}
	tw.Flush()
	return 0
}

// runUnbind is lox unbind CONTAINER HASH: the container's requests with that credential ask
// again; the console audits it.
func runUnbind(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox unbind", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHubFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, "usage: lox unbind [--state DIR] CONTAINER HASH (the first 12 or more hex digits lox credentials shows)")
		return 2
	}
	f, err := hf.facade()
	if err != nil {
		fmt.Fprintln(stderr, "lox unbind:", err)
		return 1
	}
	c, err := f.Unbind(context.Background(), pos[0], pos[1], whoami())
	if err != nil {
		fmt.Fprintln(stderr, "lox unbind:", err)
		return 1
	}
	fmt.Fprintf(stdout, "unbound sha256 %s… from %s: its requests with it ask again\n", display.Cut(display.Escape(c.Hash, false), 12), display.Escape(c.Container, false))
	return 0
}
