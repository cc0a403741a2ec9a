package tui

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// Keys that arrive in one read come as one message of several runes: each is a key press.
func TestKeysInOneBurst(t *testing.T) {
	tests := []struct {
		name  string
		burst string
		then  []string // keys pressed one by one after the burst
		want  string
	}{
		{name: "a command and its enter", burst: ":review", then: []string{"enter"}, want: "review: nothing to review"},
		{name: "a command with arguments", burst: ":echo", then: []string{" ", "a", "enter"}, want: "echo: a"},
		{name: "help then back", burst: "?", want: "Keys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			s.cfg.Commands = map[string]func([]string) (string, error){
				"review": func([]string) (string, error) { return "review: nothing to review", nil },
				"echo":   func(args []string) (string, error) { return "echo: " + strings.Join(args, " "), nil },
			}
			d := s.start(t)
			d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(tc.burst)})
			for _, k := range tc.then {
				if k == " " {
					d.send(tea.KeyMsg{Type: tea.KeySpace, Runes: []rune{' '}})
					continue
				}
				d.key(k)
			}
			d.waitView(tc.want)
		})
	}
}

// A burst of y approves the selected ticket only: the second y comes right after the selection
// moved to the next ticket, and is refused as a key pressed then always is.
func TestBurstOfYApprovesOne(t *testing.T) {
	s := newSetup(t)
	a := ask(t, s.hub, hub.AskRequest{URL: "https://a.example.com/"})
	s.clk.Advance(time.Second)
	b := ask(t, s.hub, hub.AskRequest{URL: "https://b.example.com/"})
	d := s.start(t)
	s.settle()
	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("yy")})
	if got := status(t, s.hub, b.ID).Status; got != hub.Approved {
		t.Fatalf("the selected (newest) ticket is %s, want approved", got)
	}
	if got := status(t, s.hub, a.ID).Status; got != hub.Pending {
		t.Fatalf("the second y of the burst decided the next ticket: %s", got)
	}
	d.waitView("the selection just moved")
}

// Pasted text (bracketed paste) is still no key press, however many runes it has.
func TestPastedBurstDecidesNothing(t *testing.T) {
	s := newSetup(t)
	ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/"})
	d := s.start(t)
	s.settle()
	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("yyy"), Paste: true})
	if len(s.hub.Pending()) != 1 {
		t.Fatal("a pasted yyy approved a ticket")
	}
}

// The real program reads ":review" and Enter written at once, as tmux send-keys or a paste
// without bracketed paste delivers them.
func TestRunKeysInOneWrite(t *testing.T) {
	s := newSetup(t)
	s.cfg.Commands = map[string]func([]string) (string, error){
		"review": func([]string) (string, error) { return "review ran: nothing to review", nil },
	}
	in, out, _ := runUI(t, context.Background(), s.cfg)
	testkit.WaitFor(t, 5*time.Second, "the first screen", func() bool { return strings.Contains(out.String(), "Pending tickets") })
	io.WriteString(in, ":review\r")
	testkit.WaitFor(t, 5*time.Second, "the command's output", func() bool { return strings.Contains(out.String(), "review ran: nothing to review") })
}
