package main

import "testing"

// An answer from lox is recorded under LOCKHTTP_OPERATOR when it is set: in the compose
// setup's console lox runs as a uid with no name.
func TestWhoamiOperator(t *testing.T) {
	t.Setenv(OperatorEnv, "alice")
	if got := whoami(); got != "alice" {
		t.Errorf("whoami() = %q with %s=alice", got, OperatorEnv)
	}
	t.Setenv(OperatorEnv, "")
	if got := whoami(); got == "" || got == "alice" {
		t.Errorf("whoami() = %q without it", got)
	}
}
