// Package deptest holds the dependency test that keeps the pure packages pure: no file system,
// network, process, signal or logging package, and of this module only the pure packages and
// the few others named in its test.
package deptest
