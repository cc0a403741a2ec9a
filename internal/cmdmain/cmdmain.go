// Package cmdmain is how every lockhttp binary starts, written once: the daemons' -log-level and
// -version flags, their JSON logger on stderr, the exit code of a command line that does not
// parse, and the context that ends on SIGINT or SIGTERM.
package cmdmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/buildinfo"
)

// Flags are the flags every daemon of the stack (gate, console, signer) takes.
type Flags struct {
	// LogLevel is debug, info, warn or error; "info" unless given.
	LogLevel string
	// Version asks for the build line and nothing else.
	Version bool
}

// Define defines -log-level and -version on fs; what names the binary in the usage text ("the
// gate").
func (f *Flags) Define(fs *flag.FlagSet, what string) {
	f.DefineLogLevel(fs)
	fs.BoolVar(&f.Version, "version", false, "print "+what+"'s version (module version, revision, build) and exit")
}

// DefineLogLevel defines -log-level alone, for a binary whose version is a command of its own
// (signer --version).
func (f *Flags) DefineLogLevel(fs *flag.FlagSet) {
	fs.StringVar(&f.LogLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
}

// Logger is the JSON logger on w at LogLevel. An unknown level is an error that quotes it and
// names the levels; the caller puts the flag's name before it.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("%q is no log level: use debug, info, warn or error", f.LogLevel)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})), nil
}

// Start is what a daemon does once its flags are parsed: with -version it prints name's build
// line on stdout and the run ends (ok false, exit 0); an unknown -log-level is said on stderr and
// ends it (exit 2); otherwise it returns the logger on stderr.
func (f *Flags) Start(name string, stdout, stderr io.Writer) (log *slog.Logger, exit int, ok bool) {
	if f.Version {
		PrintVersion(stdout, name)
		return nil, 0, false
	}
	log, err := f.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: -log-level %v\n", name, err)
		return nil, 2, false
	}
	return log, 0, true
}

// PrintVersion prints name's build line (buildinfo.Line) on w, as every binary's --version does.
func PrintVersion(w io.Writer, name string) {
	fmt.Fprintln(w, buildinfo.Line(name))
}

// Parse parses args with fs. ok is false when the run ends here, with exit: 0 after -h (the flag
// package printed the usage), 2 after a flag it refused (it said which, and the usage).
func Parse(fs *flag.FlagSet, args []string) (exit int, ok bool) {
	if err := fs.Parse(args); err != nil {
		return exitCode(err), false
	}
	return 0, true
}

// UsageExit is the exit code of a command line that did not parse or check: 0 for -h (the flag
// package printed the usage), else 2 after "name: err" on stderr.
func UsageExit(name string, err error, stderr io.Writer) int {
	if code := exitCode(err); code != 0 {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return code
	}
	return 0
}

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// Signals returns a context that ends when the process gets SIGINT or SIGTERM, and the function
// that stops listening for them.
func Signals() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
