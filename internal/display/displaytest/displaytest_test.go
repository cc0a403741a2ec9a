package displaytest

import (
	"testing"

	"github.com/lockhttp/lockhttp/internal/display"
)

func TestTexts(t *testing.T) {
	for name, tx := range map[string]Text{"URL": URL, "Header": Header, "Reason": Reason, "Typed": {Typed.Clean, Typed.Shown}} {
		if got := display.Escape(tx.Raw, false); got != tx.Shown {
			t.Errorf("%s: display.Escape(%q) = %q, want %q", name, tx.Raw, got, tx.Shown)
		}
	}
	if got := display.Clean(Typed.Raw); got != Typed.Clean {
		t.Errorf("display.Clean(%q) = %q, want %q", Typed.Raw, got, Typed.Clean)
	}
}
