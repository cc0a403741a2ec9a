// Package buildinfo says which build of lockhttp a binary is, from the build information the Go
// toolchain records in it: the module's version, the VCS revision and its time, and whether the
// work tree had uncommitted changes.
package buildinfo

import (
	"runtime/debug"
	"strings"
	"time"
)

// Info is one binary's build.
type Info struct {
	// Version is the main module's version: a tag (v1.2.0), a pseudo-version, or "(devel)" for a
	// build in a work tree the toolchain stamps no version on. Never empty.
	Version string
	// Revision is the VCS commit the binary was built from; empty when none was recorded (a build
	// with -buildvcs=false, outside a repository, or go install of a tagged version).
	Revision string
	// Time is the commit's time; zero when none was recorded.
	Time time.Time
	// Modified: the work tree had changes the commit does not hold.
	Modified bool
	// Go is the toolchain that built the binary (go1.26.8); empty when unknown.
	Go string
	// Stamp is what compose/build.sh stamped into the binary (-ldflags -X): git describe
	// --always --dirty of the checkout, or "tree-" and a hash of its sources outside git. It
	// tells builds apart where the toolchain records no revision (GOFLAGS=-buildvcs=false).
	// Empty: not stamped.
	Stamp string
}

// stamp is set by the linker: go build -ldflags "-X
// github.com/lockhttp/lockhttp/internal/buildinfo.stamp=..." (compose/build.sh).
var stamp string

// Read returns the running binary's build. A binary without build information (never one built
// by the go command) reads as version "(unknown)".
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(unknown)", Stamp: stamp}
	}
	i := From(bi)
	i.Stamp = stamp
	return i
}

// From reads an Info out of the toolchain's build information.
func From(bi *debug.BuildInfo) Info {
	i := Info{Version: bi.Main.Version, Go: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				i.Time = t.UTC()
			}
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the build on one line, as --version prints it after the program's name and as
// up.json and lockhttp doctor show it:
//
//	version v1.2.0, revision 0123…cdef of 2026-03-01T12:00:00Z (modified), go1.26.8
//	version (devel), no revision recorded, go1.26.8
//	version (devel), no revision recorded, build 7b89729-dirty, go1.26.8
func (i Info) String() string {
	var b strings.Builder
	b.WriteString("version ")
	b.WriteString(i.Version)
	if i.Revision == "" {
		b.WriteString(", no revision recorded")
	} else {
		b.WriteString(", revision ")
		b.WriteString(i.Revision)
		if !i.Time.IsZero() {
			b.WriteString(" of ")
			b.WriteString(i.Time.Format(time.RFC3339))
		}
		if i.Modified {
			b.WriteString(" (modified)")
		}
	}
	if i.Stamp != "" {
		b.WriteString(", build ")
		b.WriteString(i.Stamp)
	}
	if i.Go != "" {
		b.WriteString(", ")
		b.WriteString(i.Go)
	}
	return b.String()
}

// Line is what a binary's --version prints: its name and its build, on one line without the
// line break.
func Line(program string) string {
	return program + " " + Read().String()
}
