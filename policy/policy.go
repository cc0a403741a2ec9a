// Package policy holds the policy lockhttp ships, policy/default.toml (importers name it shipped,
// beside internal/policy, which reads policies).
package policy

import _ "embed"

// Default is policy/default.toml: the policy `lox run` starts with when none is named.
//
//go:embed default.toml
var Default []byte
