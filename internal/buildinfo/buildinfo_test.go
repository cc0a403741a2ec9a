package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromAndString(t *testing.T) {
	const rev = "b36fa75e469e3165cf65438394882336c1e52501"
	tests := []struct {
		name  string
		bi    debug.BuildInfo
		stamp string
		want  string
	}{
		{
			name: "a commit of a clean tree",
			bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/lockhttp/lockhttp", Version: "v1.2.0"},
				Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-03-01T12:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			want: "version v1.2.0, revision " + rev + " of 2026-03-01T12:00:00Z, go1.26.8",
		},
		{
			name: "a work tree with changes",
			bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20260301120000-b36fa75e469e+dirty"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-03-01T13:00:00+01:00"}, {Key: "vcs.modified", Value: "true"}}},
			want: "version v0.0.0-20260301120000-b36fa75e469e+dirty, revision " + rev + " of 2026-03-01T12:00:00Z (modified), go1.26.8",
		},
		{
			name: "no VCS information",
			bi:   debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want: "version (devel), no revision recorded, go1.26.8",
		},
		{
			name: "no version at all",
			bi:   debug.BuildInfo{},
			want: "version (devel), no revision recorded",
		},
		{
			name: "a revision without a time",
			bi:   debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "not a time"}}},
			want: "version (devel), revision " + rev,
		},
		{
			name:  "stamped by compose/build.sh, no revision recorded",
			bi:    debug.BuildInfo{GoVersion: "go1.26.8"},
			stamp: "7b89729-dirty",
			want:  "version (devel), no revision recorded, build 7b89729-dirty, go1.26.8",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i := From(&tc.bi)
			i.Stamp = tc.stamp
			if got := i.String(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// Line is one line: the program, then the build of the test binary itself.
func TestLine(t *testing.T) {
	got := Line("lox")
	if !strings.HasPrefix(got, "lox version ") || strings.ContainsAny(got, "\r\n") {
		t.Fatalf("Line = %q", got)
	}
	if want := "lox " + Read().String(); got != want {
		t.Fatalf("Line = %q, want %q", got, want)
	}
}

// TestStampLinked: the -X flag compose/build.sh gives the linker reaches Read, with the
// toolchain's revision off (GOFLAGS=-buildvcs=false): two builds' --version differ by it.
func TestStampLinked(t *testing.T) {
	script, err := os.ReadFile("../../compose/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	const flag = "-X github.com/lockhttp/lockhttp/internal/buildinfo.stamp="
	if !strings.Contains(string(script), flag+"$stamp") {
		t.Fatalf("compose/build.sh does not stamp with %q", flag)
	}
	bin := filepath.Join(t.TempDir(), "stamped")
	cmd := exec.Command("go", "build", "-ldflags", flag+"abc1234-dirty", "-o", bin, "./testdata/stamped")
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || !strings.Contains(string(out), ", no revision recorded, build abc1234-dirty, ") {
		t.Fatalf("the stamped binary says %q (%v)", out, err)
	}
}
