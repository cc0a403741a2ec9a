package console

import (
	"strings"
	"testing"
)

func TestLineDiff(t *testing.T) {
	a := "version = 1\ntrusted = []\n[[rule]]\nname = \"x\"\nverdict = \"ask\"\n"
	b := "version = 1\ntrusted = []\n[[rule]]\nname = \"x\"\nverdict = \"free\"\n"
	d := lineDiff(a, b)
	if !strings.Contains(d, `- verdict = "ask"`) || !strings.Contains(d, `+ verdict = "free"`) || !strings.Contains(d, `  name = "x"`) {
		t.Fatalf("diff:\n%s", d)
	}
	if lineDiff(a, a) != "" {
		t.Fatal("a diff of equal files")
	}
}
