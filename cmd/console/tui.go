package main

import (
	"context"
	"os"
	"os/user"
	"strings"
	"sync"

	"github.com/lockhttp/lockhttp/internal/console"
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

// runTUI runs the terminal UI on this process's terminal until the user quits or ctx ends.
func runTUI(ctx context.Context, hs *hubServer, c *console.Console, msgs *messages) error {
	name := "console"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	cfg := tui.Config{
		Hub:  hs.hub,
		User: name,
		Status: func() []string {
			var out []string
			if g := hs.hub.GateState(); g.Listen != "" {
				out = append(out, "proxy: http://"+g.Listen+"   hub: http://"+hs.addr)
			}
			if st := c.Current(); st != nil {
				out = append(out, "policy: "+st.Name)
			}
			return append(out, msgs.last()...)
		},
	}
	if hs.phone != nil {
		cfg.PairingURL = hs.phone.NewPairing
	}
	return tui.Run(ctx, cfg, os.Stdin, os.Stdout)
}
