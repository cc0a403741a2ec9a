package tui

import "github.com/charmbracelet/bubbles/key"

// keyMap is every key the UI answers. There is deliberately no key that approves more than the
// one ticket on the screen, and none that approves without y.
type keyMap struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
	Open, Back                              key.Binding
	Approve, Deny                           key.Binding
	Pair, Command, Help, Refresh, Quit      key.Binding
	Filter                                  key.Binding
	ForceQuit                               key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
		Up:        key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "previous ticket (scroll in details)")),
		Down:      key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "next ticket (scroll in details)")),
		PageUp:    key.NewBinding(key.WithKeys("pgup", "ctrl+b"), key.WithHelp("pgup", "page up")),
		PageDown:  key.NewBinding(key.WithKeys("pgdown", "ctrl+f", " "), key.WithHelp("pgdn", "page down")),
		Top:       key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g", "first (newest) ticket")),
		Bottom:    key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G", "last (oldest) ticket")),
		Open:      key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "details")),
		Back:      key.NewBinding(key.WithKeys("esc", "backspace", "left", "h"), key.WithHelp("esc", "back")),
		Approve:   key.NewBinding(key.WithKeys("y"), key.WithHelp("y", "approve this ticket")),
		Deny:      key.NewBinding(key.WithKeys("n"), key.WithHelp("n", "deny this ticket (asks for a reason)")),
		Pair:      key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "phone pairing QR code")),
		Command:   key.NewBinding(key.WithKeys(":"), key.WithHelp(":", "command (:q quit)")),
		Help:      key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Refresh:   key.NewBinding(key.WithKeys("r", "ctrl+l"), key.WithHelp("r", "reread the hub and redraw")),
		Filter:    key.NewBinding(key.WithKeys("f"), key.WithHelp("f", "recent decisions: all, refused, asks")),
		Quit:      key.NewBinding(key.WithKeys("q"), key.WithHelp("q", "quit")),
		ForceQuit: key.NewBinding(key.WithKeys("ctrl+c"), key.WithHelp("ctrl+c", "quit")),
	}
}

// listHelp and detailHelp are the footer lines.
func (k keyMap) listHelp() []key.Binding {
	return []key.Binding{k.Approve, k.Deny, k.Open, k.Pair, k.Command, k.Help, k.Quit}
}

func (k keyMap) detailHelp() []key.Binding {
	return []key.Binding{k.Approve, k.Deny, k.Back, k.Up, k.Pair, k.Command, k.Help, k.Quit}
}

// all is the help page.
func (k keyMap) all() []key.Binding {
	return []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, k.Open, k.Back, k.Approve, k.Deny,
		k.Pair, k.Command, k.Refresh, k.Filter, k.Help, k.Quit, k.ForceQuit}
}
