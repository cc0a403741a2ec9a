// Package displaytest holds hostile texts with the way every human-facing surface (the terminal,
// the phone page, lox) must show them, so that their tests check the same escape.
package displaytest

// Text is a hostile text and how display.Escape shows it on one line.
type Text struct {
	Raw, Shown string
}

// Each holds a bidi override, a zero-width space, a clear-screen sequence, a NUL and a Cyrillic
// look-alike beside ASCII letters.
var (
	URL    = Text{"https://g\u0456thub.com/\u202eexe.txt\u200b\x1b[2J\x00", `https://g\u{0456}thub.com/\u{202E}exe.txt\u{200B}\x1b[2J\x00`}
	Header = Text{"p\u0430y\u202e\u200b\x1b[2J\x00", `p\u{0430}y\u{202E}\u{200B}\x1b[2J\x00`}
	Reason = Text{"ask \u0430pple\u202e\u200b\x1b[2J\x00", `ask \u{0430}pple\u{202E}\u{200B}\x1b[2J\x00`}
)

// Typed is what a human might type as a denial's reason (or paste: controls and all); Clean is
// what display.Clean leaves of it, which is what the hub records, and Shown how that is shown.
var Typed = struct{ Raw, Clean, Shown string }{
	"no\u202e \u200bway\x1b[2J\x00\n p\u0430ypal ", "no way[2J  p\u0430ypal", `no way[2J  p\u{0430}ypal`,
}

// Raw are the characters of the texts above that must never reach a screen as they are.
var Raw = []string{"\u202e", "\u200b", "\x1b[2J", "\x00", "\u0430", "\u0456"}
