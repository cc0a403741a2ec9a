// Package deptest holds the dependency tests: the pure packages stay pure (no file system,
// network, process, signal or logging package, and of this module only the pure packages and
// the few others named in its test), each binary links only what its process needs (the gate no
// signer, console or hub), and the contracts of the sockets link neither server nor client.
package deptest
