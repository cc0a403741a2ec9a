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

// Bounds of the pins the gate keeps: endpoints (each name, host and path counts as one) and the
// tools of one endpoint; past them nothing more is pinned, and the log says so. Marks: the
// containers and endpoints whose last injection phrases wait for a ticket, and the phrases each.
const (
	maxPinEndpoints = 256
	maxPinTools     = mcp.MaxTools
	maxMarkKeys     = 1024
	maxMarksKept    = mcp.MaxMarks
	maxPinsFile     = 64 << 20
)

// mcpState is what the gate remembers of the MCP servers' answers: each endpoint's tool pins
// (judge.MCPPins), kept in memory and in mcpPinsFile, and the injection phrases of each
// container's last answers from each endpoint, in memory until its next ticket shows them.
type mcpState struct {
	log  *slog.Logger
	file string // "": pins in memory only

	mu    sync.Mutex
	eps   map[string]*endpointPins // guarded by mu: by endpointKey
	marks map[string][]string      // guarded by mu: by container and endpoint name
}

// endpointPins are the pins of one endpoint, since its first tools/list answer.
type endpointPins struct {
	// Pinned is each tool's pin (mcp.Tool.Pin) at first sight, or as a human approved it. A pin
	// of "" is a name approved before any definition of it was seen: its next is taken.
	Pinned map[string]string `json:"pinned"`
	// Seen is the definition last listed of a tool whose definition differs from its pin, or
	// that is not pinned (listed after the first answer).
	Seen map[string]string `json:"seen,omitempty"`
}

// endpointKey names an endpoint in the pins: its name, host and path, so that an endpoint
// moved to another server starts afresh.
func endpointKey(e *policy.MCPEndpoint) string { return e.Name + " " + e.Host + e.Path }

// newMCPState reads the pins of heldDir's parent (none when heldDir is empty: in memory only).
func newMCPState(heldDir string, log *slog.Logger) *mcpState {
	s := &mcpState{log: log, eps: map[string]*endpointPins{}, marks: map[string][]string{}}
	if heldDir == "" {
		return s
	}
	s.file = filepath.Join(filepath.Dir(filepath.Clean(heldDir)), mcpPinsFile)
	data, err := atomicfile.ReadFile(s.file, maxPinsFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		log.Error("the MCP tools' pins do not load: every tool is pinned afresh at its next tools/list", "file", s.file, "err", err)
	default:
		if err := json.Unmarshal(data, &s.eps); err != nil {
			log.Error("the MCP tools' pins do not load: every tool is pinned afresh at its next tools/list", "file", s.file, "err", err)
			s.eps = map[string]*endpointPins{}
		}
		for k, ep := range s.eps {
			if ep == nil || ep.Pinned == nil {
				delete(s.eps, k)
			}
		}
	}
	return s
}

// Pin says what the gate saw of tool on e (judge.MCPPins): PinSame until the endpoint's tools
// are pinned; then PinChanged for a pinned tool listed since with another definition, PinNew
// for a name not pinned (listed since, or never listed).
func (s *mcpState) Pin(e *policy.MCPEndpoint, tool string) judge.PinChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.eps[endpointKey(e)]
	if ep == nil {
		return judge.PinSame
	}
	pin, pinned := ep.Pinned[tool]
	switch {
	case !pinned:
		return judge.PinNew
	case pin == "":
		return judge.PinSame
	}
	if _, changed := ep.Seen[tool]; changed {
		return judge.PinChanged
	}
	return judge.PinSame
}

// listed records the tools of a tools/list answer from e: the first answer pins them all;
// later, a tool whose definition differs from its pin, or a name not pinned, is seen (and its
// next call asks); a tool listed as pinned again is as pinned. It returns what changed, in
// words, its names through shown.
func (s *mcpState) listed(e *policy.MCPEndpoint, tools []mcp.Tool, shown func(string) string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := endpointKey(e)
	ep := s.eps[key]
	var words []string
	if ep == nil {
		if len(s.eps) >= maxPinEndpoints {
			s.log.Warn("MCP pins: too many endpoints; this one's tools are not pinned", "endpoint", e.Name, "max", maxPinEndpoints)
			return ""
		}
		ep = &endpointPins{Pinned: map[string]string{}}
		s.eps[key] = ep
		for _, t := range tools {
			if len(ep.Pinned) < maxPinTools {
				ep.Pinned[t.Name] = t.Pin
			}
		}
		s.save()
		return fmt.Sprintf("pinned %d tools", len(ep.Pinned))
	}
	dirty := false
	for _, t := range tools {
		pin, pinned := ep.Pinned[t.Name]
		switch {
		case pinned && pin == "":
			ep.Pinned[t.Name] = t.Pin // approved unseen: this is its definition
			dirty = true
		case pinned && pin == t.Pin:
			if _, ok := ep.Seen[t.Name]; ok {
				delete(ep.Seen, t.Name) // back to its pinned definition
				dirty = true
			}
		case ep.Seen[t.Name] == t.Pin:
		case len(ep.Seen) >= maxPinTools:
		default:
			if ep.Seen == nil {
				ep.Seen = map[string]string{}
			}
			ep.Seen[t.Name] = t.Pin
			dirty = true
			if pinned {
				words = append(words, "the definition of "+shown(t.Name)+" changed since it was pinned")
			} else {
				words = append(words, shown(t.Name)+" was not listed when the tools were pinned")
			}
		}
	}
	if dirty {
		s.save()
	}
	return strings.Join(words, "; ")
}

// accept takes the definition last seen of tool on e as its pin: a human approved a call of
// it.
func (s *mcpState) accept(e *policy.MCPEndpoint, tool string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.eps[endpointKey(e)]
	if ep == nil || len(ep.Pinned) >= maxPinTools {
		return
	}
	ep.Pinned[tool] = ep.Seen[tool] // "" when never seen: its next definition is taken
	delete(ep.Seen, tool)
	s.save()
}

// save writes the pins to the file, when there is one (with mu held). A failure is logged: the
// pins in memory still hold until a restart.
func (s *mcpState) save() {
	if s.file == "" {
		return
	}
	data, err := json.Marshal(s.eps)
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
