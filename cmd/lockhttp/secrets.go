package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/lockhttp/lockhttp/internal/gatefiles"
)

// maxSecret bounds the value secrets add reads.
const maxSecret = 64 << 10

const secretsUsage = "usage: lockhttp secrets add NAME --secrets FILE [--from-file F]   (the value: F's content, or stdin)"

func runSecrets(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "add" {
		fmt.Fprintln(stderr, secretsUsage)
		return 2
	}
	fs := flag.NewFlagSet("lockhttp secrets add", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, secretsUsage)
		fs.PrintDefaults()
	}
	path := fs.String("secrets", "", "the gate's secrets `FILE` (required; created with mode 0600 if missing, other entries kept)")
	from := fs.String("from-file", "", "read the value from `F` (default: standard input); a final newline is dropped")
	// NAME may come before the flags (secrets add anthropic --secrets F) or after them.
	rest := args[1:]
	var name string
	if len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		fs.Parse(fs.Args()[1:])
	}
	if name == "" || *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, secretsUsage)
		return 2
	}
	value, err := readSecret(*from, stdin)
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp secrets add:", err)
		return 1
	}
	if err := gatefiles.Put(*path, name, value); err != nil {
		fmt.Fprintln(stderr, "lockhttp secrets add:", err)
		return 1
	}
	fmt.Fprintf(stdout, "secret %s written to %s\n", name, *path)
	return 0
}

// readSecret reads a value from the file from, or from stdin when from is "", without its final
// newline. Errors never hold the value.
func readSecret(from string, stdin io.Reader) (string, error) {
	r, what := stdin, "standard input"
	if from != "" {
		f, err := os.Open(from)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r, what = f, from
	}
	data, err := io.ReadAll(io.LimitReader(r, maxSecret+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", what, err)
	}
	if len(data) > maxSecret {
		return "", fmt.Errorf("%s holds more than %d bytes: not a credential", what, maxSecret)
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	data = bytes.TrimSuffix(data, []byte("\r"))
	if len(data) == 0 {
		return "", fmt.Errorf("%s is empty: give the credential there", what)
	}
	if bytes.ContainsAny(data, "\r\n") {
		return "", fmt.Errorf("%s holds more than one line: give the credential alone", what)
	}
	return string(data), nil
}
