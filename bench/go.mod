// The benchmarks' own module: their load generators, origins and the proxies the gate is compared
// with, so that the comparators' modules stay out of the main go.mod. The scripts (*.sh) build the
// lockhttp binaries from the main module and these programs from this one.
module github.com/lockhttp/lockhttp/bench

go 1.26.8

require github.com/elazarl/goproxy v1.9.3

require (
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
