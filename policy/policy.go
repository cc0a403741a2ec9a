// Package policy holds the policy files lockhttp ships.
package policy

import _ "embed"

// Default is policy/default.toml: the policy `lox run` starts with when none is named.
//
//go:embed default.toml
var Default []byte
