package mcp

import (
	"github.com/lockhttp/lockhttp/internal/policy"
)

// PinChange is what was seen of a tool's definition since its endpoint's tools were pinned.
type PinChange uint8

const (
	PinSame    PinChange = iota // as pinned, or the endpoint never listed
	PinChanged                  // listed since with another definition
	PinNew                      // a name not pinned: listed after the first list, or never listed (a renamed or added tool)
)

// Bounds of Pins: past them nothing more is pinned.
const (
	MaxPinEndpoints = 256
	MaxPinTools     = MaxTools
)

// Pins are the tool pins of MCP endpoints by PinsKey, as the gate keeps them (in its audit
// directory, as JSON) and lockhttp explain reads them. The zero value pins nothing; it is not
// safe for concurrent use.
type Pins map[string]*EndpointPins

// EndpointPins are the pins of one endpoint, since its first tools/list answer.
type EndpointPins struct {
	// Pinned is each tool's pin (Tool.Pin) at first sight, or as a human approved it. A pin of
	// "" is a name approved before any definition of it was seen: its next is taken.
	Pinned map[string]string `json:"pinned"`
	// Seen is the definition last listed of a tool whose definition differs from its pin, or
	// that is not pinned.
	Seen map[string]string `json:"seen,omitempty"`
}

// PinsKey names an endpoint in Pins: its name, host and path, so that an endpoint moved to
// another server starts afresh.
func PinsKey(e *policy.MCPEndpoint) string { return e.Name + " " + e.Host + e.Path }

// Pin says what was seen of tool on e: PinSame until the endpoint's tools are pinned; then
// PinChanged for a pinned tool listed since with another definition, PinNew for a name not
// pinned. (It is the judge's judge.MCPPins.)
func (p Pins) Pin(e *policy.MCPEndpoint, tool string) PinChange {
	ep := p[PinsKey(e)]
	if ep == nil {
		return PinSame
	}
	pin, pinned := ep.Pinned[tool]
	switch {
	case !pinned:
		return PinNew
	case pin == "":
		return PinSame
	}
	if _, changed := ep.Seen[tool]; changed {
		return PinChanged
	}
	return PinSame
}

// Listed records the tools of a tools/list answer from e: the first answer pins them all;
// later, a tool whose definition differs from its pin, or a name not pinned, is seen; a tool
// listed as pinned again is as pinned. It returns the names whose definition changed and the
// names not pinned, newly seen, the number pinned by a first answer, and whether p changed.
func (p Pins) Listed(e *policy.MCPEndpoint, tools []Tool) (changed, added []string, pinned int, dirty bool) {
	key := PinsKey(e)
	ep := p[key]
	if ep == nil {
		if len(p) >= MaxPinEndpoints {
			return nil, nil, 0, false
		}
		ep = &EndpointPins{Pinned: map[string]string{}}
		p[key] = ep
		for _, t := range tools {
			if len(ep.Pinned) < MaxPinTools {
				ep.Pinned[t.Name] = t.Pin
			}
		}
		return nil, nil, len(ep.Pinned), true
	}
	for _, t := range tools {
		pin, isPinned := ep.Pinned[t.Name]
		switch {
		case isPinned && pin == "":
			ep.Pinned[t.Name] = t.Pin // approved unseen: this is its definition
			dirty = true
		case isPinned && pin == t.Pin:
			if _, ok := ep.Seen[t.Name]; ok {
				delete(ep.Seen, t.Name) // back to its pinned definition
				dirty = true
			}
		case ep.Seen[t.Name] == t.Pin && t.Pin != "":
		case len(ep.Seen) >= MaxPinTools:
		default:
			if ep.Seen == nil {
				ep.Seen = map[string]string{}
			}
			ep.Seen[t.Name] = t.Pin
			dirty = true
			if isPinned {
				changed = append(changed, t.Name)
			} else {
				added = append(added, t.Name)
			}
		}
	}
	return changed, added, 0, dirty
}

// Accept takes the definition last seen of tool on e as its pin (a human approved a call of it),
// and reports whether p changed.
func (p Pins) Accept(e *policy.MCPEndpoint, tool string) bool {
	ep := p[PinsKey(e)]
	if ep == nil || len(ep.Pinned) >= MaxPinTools {
		return false
	}
	ep.Pinned[tool] = ep.Seen[tool] // "" when never seen: its next definition is taken
	delete(ep.Seen, tool)
	return true
}
