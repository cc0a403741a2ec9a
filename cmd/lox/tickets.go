package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/fingerprint"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/phone"
	"github.com/lockhttp/lockhttp/internal/stack"
)

// parseInterleaved parses flags before and after positional arguments (Go's flag package stops
// at the first one) and returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// hubFlags are the flags that say which hub to talk to: the stack in --state (its up.json), or
// --hub with --hub-token (a compose setup, where there is no up.json), or an https:// --hub with
// lox's identity (--tls-cert, --tls-key, --tls-ca: a fleet's hub on another machine).
type hubFlags struct {
	state, hub, token *string
	tls               *mtls.Flags
	consoles          *mtls.Allow
}

func addHubFlags(fs *flag.FlagSet) hubFlags {
	h := hubFlags{
		state:    fs.String("state", ".lockfamily", "the stack's state directory (its up.json names the hub)"),
		hub:      fs.String("hub", "", "the hub's URL, instead of --state's up.json: http://HOST:PORT with --hub-token, or https://HOST:PORT (the console's -hub-tls-listen) with lox's identity, --tls-cert, --tls-key and --tls-ca"),
		token:    fs.String("hub-token", "", "the facade token file for an http:// --hub"),
		tls:      &mtls.Flags{},
		consoles: &mtls.Allow{},
	}
	h.tls.Register(fs)
	fs.Var(h.consoles, "tls-console", "an identity the hub must prove over mutual TLS (repeatable; default spiffe://lockhttp/console/*)")
	return h
}

func (h hubFlags) facade() (*hubclient.Facade, error) {
	if strings.HasPrefix(*h.hub, "https://") {
		if *h.token != "" {
			return nil, errors.New("--hub-token is for an http:// --hub: over mutual TLS lox's certificate names it (a facade identity: lockhttp fleet issue facade NAME)")
		}
		src, err := h.tls.Load(nil)
		if err != nil {
			return nil, fmt.Errorf("an https:// --hub: %w", err)
		}
		allow := *h.consoles
		if allow.Empty() {
			allow = mtls.MustAllow("spiffe://lockhttp/console/*")
		}
		return hubclient.NewFacadeTLS(*h.hub, src.ClientConfig(allow))
	}
	if h.tls.Given() {
		return nil, errors.New("--tls-cert, --tls-key and --tls-ca are for an https:// --hub")
	}
	if *h.hub != "" {
		if *h.token == "" {
			return nil, errors.New("--hub needs --hub-token: the file with lox's facade token")
		}
		tok, err := hubclient.ReadToken(*h.token)
		if err != nil {
			return nil, err
		}
		return hubclient.NewFacade(*h.hub, tok), nil
	}
	return facade(*h.state)
}

// facade reads up.json in the state directory and returns a hub client with lox's token.
func facade(state string) (*hubclient.Facade, error) {
	data, err := os.ReadFile(filepath.Join(state, stack.UpFile))
	if err != nil {
		return nil, fmt.Errorf("no running stack in %s (%v): start it with lox run, or name its state directory with --state", state, err)
	}
	var up stack.Up
	if err := json.Unmarshal(data, &up); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(state, stack.UpFile), err)
	}
	if up.Hub == "" || up.HubCLIToken == "" {
		return nil, fmt.Errorf("%s names no hub", filepath.Join(state, stack.UpFile))
	}
	tok, err := hubclient.ReadToken(up.HubCLIToken)
	if err != nil {
		return nil, err
	}
	return hubclient.NewFacade(up.Hub, tok), nil
}

// OperatorEnv names the person at a terminal or a command line whose answers are recorded
// under that name: the compose setup's console has no login of its own (its uid has no name).
const OperatorEnv = "LOCKHTTP_OPERATOR"

// whoami is the name lox's answers are recorded under: LOCKHTTP_OPERATOR, else this user's login
// name (its account, then LOGNAME or USER), else its uid. It is what the caller says it is:
// whoever holds the hub's CLI token may name anyone, and the record shows the name given.
func whoami() string {
	if n := os.Getenv(OperatorEnv); n != "" {
		return n
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, k := range []string{"LOGNAME", "USER"} {
		if n := os.Getenv(k); n != "" {
			return n
		}
	}
	return fmt.Sprint(os.Getuid())
}

func runTickets(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox tickets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHubFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON array of the pending tickets, newest first")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "lox tickets: unexpected argument %q\n", pos[0])
		return 2
	}
	f, err := hf.facade()
	if err != nil {
		fmt.Fprintln(stderr, "lox tickets:", err)
		return 1
	}
	ts, err := f.Pending(context.Background())
	if err != nil {
		fmt.Fprintln(stderr, "lox tickets:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(ts)
		return 0
	}
	if len(ts) == 0 {
		fmt.Fprintln(stdout, "no pending tickets")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGE\tCONTAINER\tMETHOD\tURL\tRULE\tHELD\tFINGERPRINT")
	none := false
	for _, t := range ts {
		e := t.Escaped()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, time.Since(t.Created).Round(time.Second), e.Container, e.Method,
			display.Line(t.URL, 60), e.Rule, heldColumn(t), fingerprint.Short(e.Fingerprint))
		none = none || t.Holders == 0 && t.Kind != hubapi.KindRule
	}
	tw.Flush()
	for _, t := range ts {
		if t.Kind == hubapi.KindRule {
			e := t.Escaped()
			fmt.Fprintf(stdout, "%s: AN AGENT ASKS FOR A RULE, answered at the console's terminal alone (lox deny can refuse it): %s\n", e.ID, e.Reason)
		}
	}
	if none {
		fmt.Fprintln(stdout, "HELD 0: no request waits on the ticket now; approving it lets one identical retry through, once (lox approve says until when)")
	}
	return 0
}

// heldColumn is the HELD column of lox tickets: how many requests wait on the ticket, or that
// none does and why ("0 (cut by a gate restart)"); the sentence under the table says the rest.
func heldColumn(t hubapi.Ticket) string {
	if t.Holders > 0 {
		return fmt.Sprint(t.Holders)
	}
	switch t.Gone {
	case hubapi.GoneRestart:
		return "0 (cut by a gate restart)"
	case hubapi.GoneLeft:
		return "0 (told to retry)"
	}
	return "0"
}

func runDecide(approve bool, args []string, stdout, stderr io.Writer) int {
	name := "lox deny"
	if approve {
		name = "lox approve"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHubFlags(fs)
	reason := fs.String("reason", "", "why (required to deny: the agent is told it)")
	fp := fs.String("fingerprint", "", "the fingerprint you were shown (default: the ticket's, read now)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "usage: %s [--state DIR] %sTICKET_ID\n", name, map[bool]string{true: "", false: "--reason TEXT "}[approve])
		return 2
	}
	if !approve && strings.TrimSpace(*reason) == "" {
		fmt.Fprintln(stderr, "lox deny: --reason is required: the agent is told why")
		return 2
	}
	f, err := hf.facade()
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	ctx := context.Background()
	id := pos[0]
	want := *fp
	if want == "" {
		t, err := f.Get(ctx, id)
		if err != nil {
			fmt.Fprintln(stderr, name+":", err)
			return 1
		}
		want = t.Fingerprint
		e := t.Escaped()
		fmt.Fprintf(stdout, "%s %s %s (container %s, rule %s)\n", e.ID, e.Method, e.URL, e.Container, e.Rule)
		if e.Warning != "" {
			fmt.Fprintln(stdout, "warning:", e.Warning)
		}
		if c := e.MCP; c != nil {
			fmt.Fprintf(stdout, "mcp: %s %s on server %s, call %s\n", c.Method, c.Tool, c.Server, e.Fingerprint)
			if c.Arguments != "" {
				fmt.Fprintln(stdout, "arguments:", c.Arguments)
			}
		}
		if e.Waiting != "" && approve {
			fmt.Fprintln(stdout, "note:", e.Waiting)
		}
	}
	t, err := f.Decide(ctx, id, want, approve, whoami(), *reason)
	if err != nil {
		var se *hubclient.StatusError
		if errors.As(err, &se) && se.Status == 409 {
			fmt.Fprintln(stderr, name+":", se.Msg)
			return 1
		}
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	e := t.Escaped()
	fmt.Fprintf(stdout, "%s %s by %s\n", e.ID, e.Status, e.Decision.By)
	if e.Status == hubapi.Approved {
		if e.Decision.Released > 0 {
			fmt.Fprintf(stdout, "released %d held request(s)\n", e.Decision.Released)
		} else if e.Waiting != "" {
			fmt.Fprintln(stdout, e.Waiting)
		}
	}
	return 0
}

func usageErr(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func runPair(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox pair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHubFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "lox pair: unexpected argument %q\n", pos[0])
		return 2
	}
	f, err := hf.facade()
	if err != nil {
		fmt.Fprintln(stderr, "lox pair:", err)
		return 1
	}
	u, err := f.PhonePairing(context.Background())
	if err != nil {
		fmt.Fprintln(stderr, "lox pair:", err)
		return 1
	}
	if qr, err := qrcode.New(u, qrcode.Medium); err == nil {
		fmt.Fprint(stdout, qr.ToSmallString(false))
	}
	fmt.Fprintf(stdout, "%s\nOpen it on the phone within 10 minutes; it works once.\n", u)
	if phone.LoopbackOnly(u) {
		// The link is printed all the same: a browser on this machine, or a phone with a tunnel
		// of its own to this machine's loopback (adb reverse), opens it.
		fmt.Fprintf(stderr, "lox pair: the link names %s, this machine's loopback, which no phone reaches: only a browser on this machine opens it; fix: %s\n",
			display.Escape(origin(u), false), phone.ReachFix)
	}
	return 0
}

// origin is a link's scheme and host, without the path and the fragment (a pairing link's
// token).
func origin(link string) string {
	u, err := url.Parse(link)
	if err != nil {
		return "the hub"
	}
	return u.Scheme + "://" + u.Host
}
