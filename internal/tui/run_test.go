package tui

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// runUI runs Run on pipes; it returns the input to type into, the output (read by the test while
// the program writes it) and Run's answer.
func runUI(t *testing.T, ctx context.Context, c Config) (io.Writer, *testkit.Buffer, <-chan error) {
	t.Helper()
	inR, inW := io.Pipe()
	out := &testkit.Buffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, c, inR, out)
	}()
	t.Cleanup(func() { inW.Close() })
	return inW, out, errc
}

// The real program: its input parsing, its renderer, its quitting.
func TestRunApproveThenQuit(t *testing.T) {
	s := newSetup(t)
	tk := ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/run-test"})
	in, out, errc := runUI(t, context.Background(), s.cfg)
	testkit.WaitFor(t, 5*time.Second, "the ticket on the screen", func() bool { return strings.Contains(out.String(), "https://api.example.com/run-test") })
	s.settle()
	io.WriteString(in, "y")
	testkit.WaitFor(t, 5*time.Second, "the approval", func() bool { return status(t, s.hub, tk.ID).Status == hub.Approved })
	if got := status(t, s.hub, tk.ID).Decision.By; got != "terminal:alice" {
		t.Fatalf("by %q, want terminal:alice", got)
	}
	io.WriteString(in, "q") // nothing pending: quits at once
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run after q: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("q did not end Run")
	}
}

func TestRunEndsWithContext(t *testing.T) {
	s := newSetup(t)
	ask(t, s.hub, hub.AskRequest{URL: "https://api.example.com/pending"})
	ctx, cancel := context.WithCancel(context.Background())
	_, out, errc := runUI(t, ctx, s.cfg)
	testkit.WaitFor(t, 5*time.Second, "the first screen", func() bool { return strings.Contains(out.String(), "https://api.example.com/pending") })
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run after the context ended: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the context's end did not end Run")
	}
	if len(s.hub.Pending()) != 1 {
		t.Fatal("ending the UI decided the ticket")
	}
}

func TestRunNeedsHub(t *testing.T) {
	err := Run(context.Background(), Config{}, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "Config.Hub") {
		t.Fatalf("Run without a hub: %v, want an error naming Config.Hub", err)
	}
}
