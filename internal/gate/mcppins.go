package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// mcpPinsFile is the file of the MCP tools' pins, in the gate's state directory (the audit
// directory, where the journal of held requests is: Config.HeldDir's parent).
const mcpPinsFile = "mcp-pins.json"

// Bounds: the pins file read (the pins themselves: mcp.MaxPinEndpoints, mcp.MaxPinTools); the
// containers and endpoints whose last injection phrases wait for a ticket, and the phrases each.
const (
	maxMarkKeys  = 1024
	maxMarksKept = mcp.MaxMarks
	maxPinsFile  = 64 << 20
)

// mcpState is what the gate remembers of the MCP servers' answers: each endpoint's tool pins
// (mcp.Pins, the judge's judge.MCPPins), kept in memory and in mcpPinsFile, and the injection
// phrases of each container's last answers from each endpoint, in memory until its next ticket
// shows them.
type mcpState struct {
	log  *slog.Logger
	file string // "": pins in memory only

	mu    sync.Mutex
	pins  mcp.Pins            // guarded by mu
	marks map[string][]string // guarded by mu: by container and endpoint name
}

// newMCPState reads the pins of heldDir's parent (none when heldDir is empty: in memory only).
func newMCPState(heldDir string, log *slog.Logger) *mcpState {
	s := &mcpState{log: log, pins: mcp.Pins{}, marks: map[string][]string{}}
	if heldDir == "" {
		return s
	}
	s.file = filepath.Join(filepath.Dir(filepath.Clean(heldDir)), mcpPinsFile)
	pins, err := readMCPPins(s.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		log.Error("the MCP tools' pins do not load: every tool is pinned afresh at its next tools/list", "file", s.file, "err", err)
	default:
		s.pins = pins
	}
	return s
}

// readMCPPins reads a file of MCP tool pins as the gate writes it (mcp-pins.json in its audit
// directory): what lockhttp explain --mcp-pins decides with.
func readMCPPins(path string) (mcp.Pins, error) {
	data, err := atomicfile.ReadFile(path, maxPinsFile)
	if err != nil {
		return nil, err
	}
	pins := mcp.Pins{}
	if err := json.Unmarshal(data, &pins); err != nil {
		return nil, fmt.Errorf("%s: %w; delete it to pin every tool afresh", path, err)
	}
	for k, ep := range pins {
		if ep == nil || ep.Pinned == nil {
			delete(pins, k)
		}
	}
	return pins, nil
}

// Pin says what the gate saw of tool on e (judge.MCPPins, mcp.Pins.Pin).
func (s *mcpState) Pin(e *policy.MCPEndpoint, tool string) judge.PinChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pins.Pin(e, tool)
}

// listed records the tools of a tools/list answer from e (mcp.Pins.Listed) and returns what
// changed, in words, its names through shown.
func (s *mcpState) listed(e *policy.MCPEndpoint, tools []mcp.Tool, shown func(string) string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, added, pinned, dirty := s.pins.Listed(e, tools)
	if !dirty {
		if _, ok := s.pins[mcp.PinsKey(e)]; !ok {
			s.log.Warn("MCP pins: too many endpoints; this one's tools are not pinned", "endpoint", e.Name, "max", mcp.MaxPinEndpoints)
		}
		return ""
	}
	s.save()
	if pinned > 0 {
		return fmt.Sprintf("pinned %d tools", pinned)
	}
	var words []string
	for _, n := range changed {
		words = append(words, "the definition of "+shown(n)+" changed since it was pinned")
	}
	for _, n := range added {
		words = append(words, shown(n)+" was not listed when the tools were pinned")
	}
	return strings.Join(words, "; ")
}

// accept takes the definition last seen of tool on e as its pin: a human approved a call of
// it.
func (s *mcpState) accept(e *policy.MCPEndpoint, tool string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins.Accept(e, tool) {
		s.save()
	}
}

// save writes the pins to the file, when there is one (with mu held). A failure is logged: the
// pins in memory still hold until a restart.
func (s *mcpState) save() {
	if s.file == "" {
		return
	}
	data, err := json.Marshal(s.pins)
	if err == nil {
		err = atomicfile.WriteFile(s.file, data, 0o600)
	}
	if err != nil {
		s.log.Error("the MCP tools' pins could not be saved: they hold in memory until the gate restarts", "file", s.file, "err", err)
	}
}

// marked keeps the injection phrases of an answer from e to container, for its next ticket.
func (s *mcpState) marked(container string, e *policy.MCPEndpoint, marks []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := container + "\x00" + e.Name
	if _, ok := s.marks[key]; !ok && len(s.marks) >= maxMarkKeys {
		return
	}
	kept := append(s.marks[key], marks...)
	s.marks[key] = kept[max(0, len(kept)-maxMarksKept):]
}

// ticketWarning is what a ticket about an MCP request of res says of the injection phrases
// the container's earlier answers from the endpoint held, once; "" when none.
func (s *mcpState) ticketWarning(res judge.Result) string {
	if res.MCP == nil {
		return ""
	}
	s.mu.Lock()
	key := res.Container + "\x00" + res.MCP.Endpoint
	marks := s.marks[key]
	delete(s.marks, key)
	s.mu.Unlock()
	if len(marks) == 0 {
		return ""
	}
	return "An earlier answer of this MCP server to this container held phrases of a known prompt injection (the answer was passed unchanged): " +
		strings.Join(slices.Compact(marks), "; ") + "."
}
