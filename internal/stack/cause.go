package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lockhttp/lockhttp/internal/display"
)

// What a start-up error shows of a child's log: its last tailLines lines of this run, each cut
// to tailWidth bytes, from at most tailBytes at the end of the log.
const (
	tailLines = 8
	tailBytes = 64 << 10
	tailWidth = 400
)

// startError is the error of a child that did not come up: why waiting for it ended, the last
// lines it wrote to its log in this run, and the fix lockhttp knows for them.
func startError(c *child, what string, cause error, o Options) error {
	return exitError(c, fmt.Sprintf("%s did not come up: %v", what, cause), o)
}

// exitError is the error of a child that ended the stack, headline first: the last lines it
// wrote to its log in its run, and the fix lockhttp knows for them.
func exitError(c *child, headline string, o Options) error {
	lines := logTail(c.log, c.logFrom)
	var b strings.Builder
	b.WriteString(headline)
	if len(lines) == 0 {
		fmt.Fprintf(&b, "; %s holds nothing of this run", c.log)
		return fmt.Errorf("%s", b.String())
	}
	fmt.Fprintf(&b, "; the last lines of %s:", c.log)
	for _, l := range lines {
		b.WriteString("\n  | ")
		b.WriteString(l)
	}
	if fix := hint(c.name, lines, o); fix != "" {
		b.WriteString("\nfix: ")
		b.WriteString(fix)
	}
	return fmt.Errorf("%s", b.String())
}

// logTail returns the last lines written to path from offset from on, readable: each JSON log
// line shortened to its level, message and attributes, every line escaped and cut (display.Line).
func logTail(path string, from int64) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	start := max(from, fi.Size()-tailBytes)
	if start < 0 || start > fi.Size() {
		start = 0
	}
	data, err := io.ReadAll(io.NewSectionReader(f, start, tailBytes))
	if err != nil {
		return nil
	}
	if start > from {
		// The first line was cut by the window: drop it.
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, display.Line(readable(l), tailWidth))
		}
	}
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return lines
}

// readable shortens a JSON log line (log/slog's JSON handler) to "LEVEL msg key=value ...",
// without the time; another line is returned as it is.
func readable(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return line
	}
	level, _ := m["level"].(string)
	msg, _ := m["msg"].(string)
	if level == "" && msg == "" {
		return line
	}
	delete(m, "time")
	delete(m, "level")
	delete(m, "msg")
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := strings.TrimSpace(level + " " + msg)
	for _, k := range keys {
		v, err := json.Marshal(m[k])
		if err != nil {
			continue
		}
		s := string(v)
		if str, ok := m[k].(string); ok && !strings.ContainsAny(str, " \"=") {
			s = str
		}
		out += " " + k + "=" + s
	}
	return out
}

// hint is the fix lockhttp knows for a child's failure, read from the child's last lines; ""
// when it knows none (the line itself often says it). It names lox run's flags, not the
// child's.
func hint(name string, lines []string, o Options) string {
	text := strings.Join(lines, "\n")
	switch {
	case strings.Contains(text, "metrics-listen") && strings.Contains(text, "address already in use"):
		return fmt.Sprintf("another process listens on the address of the %s's metrics (--metrics-listen %s; a restart keeps the port the first start took, so that scrapes find it): stop that process, or start the stack with another --metrics-listen", name, o.MetricsListen)
	case strings.Contains(text, "address already in use"):
		switch name {
		case "gate":
			return fmt.Sprintf("another process listens on %s (another stack, perhaps): stop it, or give the gate another address with --listen", o.Listen)
		case "console":
			addr := o.HubListen
			if addr == "" {
				addr = defaultHubListen
			}
			return fmt.Sprintf("another process listens on %s (another stack, or the compose console, perhaps): stop it, or give the hub another address with --hub-listen", addr)
		}
	case name == "gate" && strings.Contains(text, "-roots"):
		switch {
		case strings.Contains(text, "no such file"):
			return fmt.Sprintf("--roots %s does not exist: give the PEM file of the roots the gate trusts for origins, or leave --roots out to trust the system's roots", o.Roots)
		case strings.Contains(text, "no PEM certificates"):
			return fmt.Sprintf("--roots %s holds no certificate: give a file of PEM blocks (-----BEGIN CERTIFICATE-----)", o.Roots)
		case strings.Contains(text, "permission denied"):
			return fmt.Sprintf("--roots %s cannot be read by this user: chmod a+r it, or copy it where it can be", o.Roots)
		}
	case name == "signer" && strings.Contains(text, "load CA") && !strings.Contains(text, "fix:"):
		return fmt.Sprintf("the CA in %s does not load: restore ca.pem and ca-key.pem together from your backup; never make a new CA to fix this, every agent trusts this one (docs/deploy.md, \"Replacing the CA\")", filepath.Join(filepath.Clean(o.StateDir), "ca"))
	case strings.Contains(text, ".sock") && strings.Contains(text, "invalid argument"):
		return fmt.Sprintf("the path of a unix socket in %s is longer than the 107 bytes the system allows: use a shorter --state", filepath.Clean(o.StateDir))
	}
	return ""
}
