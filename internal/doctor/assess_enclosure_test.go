package doctor

import (
	"strings"
	"testing"
	"time"
)

// enclosed are the facts of a local stack whose agent lox run -- enclosed, as it should be.
func enclosed() *Facts {
	ms := time.Millisecond
	return &Facts{Mode: "local", Now: now, Enclosure: &EnclosureFacts{Agent: true, PID: 4242, Link: "lox-c6120000", Gate: "198.18.0.1", Address: "198.18.0.2",
		Proxy: "198.18.0.1:3130", Namespace: "net:[4026532175]", Resolvers: []string{"198.18.0.1"},
		Probes: []EnclosureProbe{
			{Kind: "gate", Target: "198.18.0.1:3130", Outcome: "connected", Took: ms},
			{Kind: "tcp", Target: "192.0.2.2:40001", Outcome: "refused", Took: ms},
			{Kind: "tcp", Target: "198.18.0.1:40002", Outcome: "refused", Took: ms},
			{Kind: "udp", Target: "192.0.2.2:40003", Outcome: "not permitted", Took: ms},
			{Kind: "ipv6", Target: "[fd00::2]:40004", Outcome: "unreachable", Took: ms},
			{Kind: "dns", Target: "192.0.2.2:53", Outcome: "answered", Answer: []string{"198.18.0.1"}, AtGate: true, Took: ms},
		}}}
}

func enclosureLines(r *Report) []Line {
	var out []Line
	for _, l := range r.Lines {
		if l.Check == "enclosure" {
			out = append(out, l)
		}
	}
	return out
}

func TestEnclosureSound(t *testing.T) {
	lines := enclosureLines(Assess(enclosed()))
	want := []string{
		"the agent (pid 4242) runs in a network namespace of its own (net:[4026532175]): link lox-c6120000, the gate at 198.18.0.1, the agent at 198.18.0.2",
		"the agent's /etc/resolv.conf names the gate (198.18.0.1) alone",
		"the agent reaches the gate's proxy at 198.18.0.1:3130",
		"a TCP connection to 192.0.2.2:40001 fails at once (refused, 1.0 ms)",
		"a TCP connection to 198.18.0.1:40002 fails at once (refused, 1.0 ms)",
		"a UDP datagram to 192.0.2.2:40003 fails at once (not permitted, 1.0 ms)",
		"an IPv6 connection to [fd00::2]:40004 fails at once (unreachable, 1.0 ms)",
		"a DNS query to 192.0.2.2:53 lands at the gate (answered with its address, 1.0 ms)",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %+v", len(lines), len(want), lines)
	}
	for i, l := range lines {
		if l.Level != OK || l.Text != want[i] {
			t.Errorf("line %d: %s %q, want OK %q", i, l.Level, l.Text, want[i])
		}
	}
}

// TestEnclosureBreakage changes one fact of a sound enclosure and expects the line that says so.
func TestEnclosureBreakage(t *testing.T) {
	probe := func(f *Facts, kind string) *EnclosureProbe {
		for i := range f.Enclosure.Probes {
			if f.Enclosure.Probes[i].Kind == kind {
				return &f.Enclosure.Probes[i]
			}
		}
		t.Fatalf("no %s probe", kind)
		return nil
	}
	for _, tc := range []struct {
		name   string
		break_ func(f *Facts)
		level  Level
		want   string
	}{
		{"no agent (a plain lox run)", func(f *Facts) { f.Enclosure = &EnclosureFacts{} }, Warn, "fix: start the agent with sudo lox run -- COMMAND"},
		{"the doctor not root", func(f *Facts) { f.Enclosure.Err = "entering the agent's network namespace needs root" }, Error, "could not be examined: entering the agent's network namespace needs root"},
		{"the agent in the host's namespace", func(f *Facts) { f.Enclosure.SameNamespace = true }, Error, "runs in this machine's network namespace"},
		{"an agent without an enclosure in up.json", func(f *Facts) { f.Enclosure.Link = "" }, Error, "runs in this machine's network namespace"},
		{"resolv.conf names another resolver", func(f *Facts) { f.Enclosure.Resolvers = []string{"127.0.0.53"} }, Error, "names 127.0.0.53, not the gate's 198.18.0.1 alone"},
		{"a resolver socket in reach", func(f *Facts) { f.Enclosure.Sockets = []string{"/run/systemd/resolve/io.systemd.Resolve"} }, Error, "through /run/systemd/resolve/io.systemd.Resolve"},
		{"the gate out of reach", func(f *Facts) { probe(f, "gate").Outcome = "refused" }, Error, "cannot reach the gate's proxy at 198.18.0.1:3130 (refused"},
		{"a TCP connection got out", func(f *Facts) { p := probe(f, "tcp"); p.Outcome, p.Seen = "connected", true }, Error, "a TCP connection to 192.0.2.2:40001 got out of the enclosure (connected)"},
		{"a UDP datagram got out", func(f *Facts) { p := probe(f, "udp"); p.Outcome, p.Seen = "timed out", true }, Error, "a UDP datagram to 192.0.2.2:40003 got out of the enclosure"},
		{"IPv6 dropped, not refused", func(f *Facts) { probe(f, "ipv6").Outcome = "timed out" }, Warn, "was dropped, not refused"},
		{"a DNS query got out", func(f *Facts) { p := probe(f, "dns"); p.Seen, p.AtGate = true, false }, Error, "a DNS query for example.com to 192.0.2.2:53 got out of the enclosure"},
		{"a DNS query answered elsewhere", func(f *Facts) { p := probe(f, "dns"); p.Answer, p.AtGate = []string{"93.184.216.34"}, false }, Error, "was answered 93.184.216.34, not by the gate"},
		{"a DNS query the gate does not answer", func(f *Facts) { p := probe(f, "dns"); p.Outcome, p.Answer, p.AtGate = "refused", nil, false }, Warn, "the gate did not answer it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := enclosed()
			tc.break_(f)
			found := false
			for _, l := range enclosureLines(Assess(f)) {
				if l.Level == tc.level && strings.Contains(l.Text, tc.want) {
					found = true
				}
				if l.Level > tc.level {
					t.Errorf("also %s %s", l.Level, l.Text)
				}
			}
			if !found {
				t.Errorf("no %s line with %q in %+v", tc.level, tc.want, enclosureLines(Assess(f)))
			}
		})
	}
	// In compose the enclosure is not the local stack's: no line.
	f := enclosed()
	f.Mode = "compose"
	if lines := enclosureLines(Assess(f)); len(lines) != 0 {
		t.Errorf("compose: %+v", lines)
	}
}
