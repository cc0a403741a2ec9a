module github.com/lockhttp/lockhttp

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/elazarl/goproxy v1.9.3
	golang.org/x/net v0.62.0
)

require golang.org/x/text v0.43.0 // indirect
