// Package e2e holds the end-to-end tests: they build the real binaries, start the local stack
// with lox and drive it with real clients (curl, Go's net/http, raw sockets).
package e2e
