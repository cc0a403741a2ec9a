// Package shipped holds the files lockhttp ships: the default policy.
package shipped

import _ "embed"

// Default is shipped/default.toml: the policy `lox run` starts with when none is named.
//
//go:embed default.toml
var Default []byte
