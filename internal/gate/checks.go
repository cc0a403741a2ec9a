package gate

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/lockhttp/lockhttp/internal/gatefiles"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// loadChecks reads the secrets file and the policy's Claude credentials file and builds the
// checks that need them; a file that does not load is logged, and its checks refuse.
func (g *Gate) loadChecks(p *policy.Policy) *judge.Checks {
	in, problems := gatefiles.Checks(p, g.cfg.SecretsFile)
	for _, err := range problems {
		g.log.Error("the gate's secrets or Claude credentials file", "err", err)
	}
	return in
}

// WatchFiles reads the secrets file and the Claude credentials file again whenever they change,
// until ctx ends.
func (g *Gate) WatchFiles(ctx context.Context, every time.Duration) {
	stamp := func(path string) string {
		if path == "" {
			return ""
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err.Error()
		}
		return fi.ModTime().String() + "/" + fi.Mode().String() + "/" + strconv.FormatInt(fi.Size(), 10)
	}
	var last string
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		p := g.pol.Load()
		cur := stamp(g.cfg.SecretsFile)
		if p != nil {
			cur += "|" + stamp(p.ClaudeCredentials)
		}
		if p != nil && last != "" && cur != last {
			g.insp.Store(g.loadChecks(p))
			g.log.Info("secrets or Claude credentials file changed: read again")
		}
		last = cur
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
