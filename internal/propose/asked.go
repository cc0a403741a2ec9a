package propose

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// MaxAskedRule bounds the TOML of a rule an agent asks for, in bytes (hubapi.MaxRuleText).
const MaxAskedRule = 2 << 10

// Asked is a rule an agent asked for, as the console checked it against the approved policy.
type Asked struct {
	// Rule is the rule as it would be written; Block its [[rule]] table in propose's own
	// rendering, and Diff the change of the policy file that adding it makes.
	Rule  policy.FileRule
	Block string
	Diff  string
	// Loosens is the comparison's one line: what the rule loosens.
	Loosens string
}

// askedFile is what an agent's rule text may hold: [[rule]] tables, nothing else.
type askedFile struct {
	Rule []policy.FileRule `toml:"rule"`
}

// CheckAsked reads ruleText, the one [[rule]] table an agent of container asks for, strictly
// (an unknown key, another table or a second rule is refused), and holds it to what a proposal
// may be (Check) against the approved policy text named name. A rule without containers is
// for container alone; a rule naming any other container is refused. Its reason is replaced by
// one naming the container that asked (the agent's words go to the ticket, never to the file),
// and a rule without a name is given one.
func CheckAsked(name string, text []byte, container, ruleText string) (Asked, error) {
	if len(ruleText) > MaxAskedRule {
		return Asked{}, fmt.Errorf("the rule is %d bytes; at most %d", len(ruleText), MaxAskedRule)
	}
	var f askedFile
	md, err := toml.NewDecoder(bytes.NewReader([]byte(ruleText))).Decode(&f)
	if err != nil {
		return Asked{}, fmt.Errorf("the rule is not TOML: %s; give one [[rule]] table", firstLine(err.Error()))
	}
	if u := md.Undecoded(); len(u) > 0 {
		keys := make([]string, len(u))
		for i, k := range u {
			keys[i] = k.String()
		}
		return Asked{}, fmt.Errorf("the rule holds %s, which a rule asked for may not: give one [[rule]] table with name, hosts, methods, paths, containers and verdict", strings.Join(keys, ", "))
	}
	if len(f.Rule) != 1 {
		return Asked{}, fmt.Errorf("the text holds %d [[rule]] tables; give exactly one", len(f.Rule))
	}
	r := f.Rule[0]
	switch {
	case r.Containers == nil:
		r.Containers = []string{container}
	case len(r.Containers) != 1 || r.Containers[0] != container:
		return Asked{}, fmt.Errorf("containers: a rule asked for is for the asking container alone: containers = [%q], or leave the key out", container)
	}
	if r.Verdict == "" {
		r.Verdict = "free"
	}
	if r.Verdict != "free" {
		return Asked{}, errors.New(`verdict: a rule asked for frees what it names ("free"); what is refused needs no rule`)
	}
	r.Reason = "asked for by an agent of container " + container
	if r.Name == "" {
		sum := sha256.Sum256([]byte(ruleText))
		host, method := "", ""
		if len(r.Hosts) > 0 {
			host = r.Hosts[0]
		}
		if len(r.Methods) > 0 {
			method = strings.ToLower(r.Methods[0])
		}
		r.Name = fmt.Sprintf("asked-%s-%s-%s", method, host, hex.EncodeToString(sum[:3]))
	}
	if len(r.Name) > 64 {
		return Asked{}, errors.New("name: at most 64 characters")
	}
	block, err := ruleBlock(r)
	if err != nil {
		return Asked{}, err
	}
	line, err := Check(name, text, r)
	if err != nil {
		return Asked{}, err
	}
	return Asked{Rule: r, Block: block, Diff: Diff(name, text, block), Loosens: line}, nil
}

// AskedOrigin is the comment written above a rule an agent asked for: the container, the
// ticket, who took it where and when. The agent's reason stays in the ticket.
func AskedOrigin(container, ticket string, o Origin) string {
	return fmt.Sprintf("# Asked: by an agent of container %s in ticket %s (its reason is the ticket's), taken with %s by %s on %s.\n",
		safe(container), safe(ticket), safe(o.Tool), safe(o.By), o.At.UTC().Format("2006-01-02"))
}
