package main

import (
	"context"
	"errors"
	"os"
	"os/user"
	"strings"
	"sync"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/tui"
)

// messages keeps the console's last lines for the terminal UI's status area.
type messages struct {
	mu    sync.Mutex
	lines []string // guarded by mu
}

func (m *messages) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		m.lines = append(m.lines, l)
	}
	if len(m.lines) > 3 {
		m.lines = m.lines[len(m.lines)-3:]
	}
	return len(p), nil
}

func (m *messages) last() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.lines...)
}

// runTUI runs the terminal UI on this process's terminal until the user quits or ctx ends. Its
// header names the proxy's address and caCert, the CA agents trust.
func runTUI(ctx context.Context, hs *hubServer, c *console.Console, msgs *messages, rlog *restarts.Log, caCert string, pr *proposer) error {
	// Who answers here: LOCKHTTP_OPERATOR (the compose setup's console runs as a uid without a
	// name), else this user's login name. It names the person, it proves nothing: whoever can
	// start the console names anyone.
	name := "console"
	if n := os.Getenv("LOCKHTTP_OPERATOR"); n != "" {
		name = n
	} else if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	cfg := tui.Config{
		Hub:      hs.hub,
		Traffic:  hs.traffic,
		Restarts: rlog.Recent,
		User:     name,
		CACert:   caCert,
		Status: func() []string {
			out := []string{"hub: http://" + hs.addr} // the proxy's address is in the header
			out = append(out, c.StatusLines()...)
			return append(out, msgs.last()...)
		},
		Commands: map[string]func(args []string) (string, error){
			"review":  func(args []string) (string, error) { return review(c, "terminal:"+name, args) },
			"propose": func(args []string) (string, error) { return pr.command("terminal:"+name, args) },
			"rule": func(args []string) (string, error) {
				return hs.asks.command(hs.hub, "terminal:"+hub.CleanName(name), args)
			},
		},
	}
	if hs.phone != nil {
		cfg.PairingURL = hs.phone.NewPairing
		for cmd, f := range hs.phonesCommand("terminal:" + hub.CleanName(name)) {
			cfg.Commands[cmd] = f
		}
	}
	return tui.Run(ctx, cfg, os.Stdin, os.Stdout)
}

// review is the :review command: a loosening of the policy is approved or rejected here, at the
// console's own terminal, and nowhere else.
//
//	:review                       show the waiting change: what loosens, what tightens, the diff
//	:review approve VERSION       approve it (VERSION as shown, so that what you saw is what applies)
//	:review reject VERSION REASON reject it
func review(c *console.Console, by string, args []string) (string, error) {
	r := c.Pending()
	if len(args) == 0 {
		if r == nil {
			return "The policy file is the approved policy: nothing to review.", nil
		}
		return r.Text(), nil
	}
	switch args[0] {
	case "approve":
		if len(args) != 2 {
			return "", errors.New("usage: :review approve VERSION (the version :review shows)")
		}
		if err := c.Approve(args[1], by); err != nil {
			return "", err
		}
		return "Approved: the gate applies it within a few seconds.", nil
	case "reject":
		if len(args) < 3 {
			return "", errors.New("usage: :review reject VERSION REASON")
		}
		if err := c.Reject(args[1], by, strings.Join(args[2:], " ")); err != nil {
			return "", err
		}
		return "Rejected: the gate keeps the approved policy.", nil
	}
	return "", errors.New("usage: :review, :review approve VERSION, :review reject VERSION REASON")
}
