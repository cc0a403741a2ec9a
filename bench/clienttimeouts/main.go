// Command clienttimeouts measures how long common HTTP clients, run with their defaults, wait
// for an answer that never comes: each asks an origin on the loopback that reads the request and
// never answers (as a request held for a human looks to its client), and the time until the
// client gives up is printed as a Markdown table. A client still waiting at -cap is stopped and
// reported as such. docs/ask.md reads the figures to choose the hold.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// client is one client run: its name, and the command that asks base (the silent origin's URL).
type client struct {
	name string
	cmd  func(base, dir string) *exec.Cmd
	note string
}

func main() {
	limit := flag.Duration("cap", 330*time.Second, "stop a client still waiting after this long")
	only := flag.String("only", "", "comma-separated client names to run (default: all)")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{} // first request line → how many times asked
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go silent(c, func(line string) {
				mu.Lock()
				seen[line]++
				mu.Unlock()
			})
		}
	}()
	base := "http://" + ln.Addr().String()
	py := "/usr/bin/python3"
	env := func(cmd *exec.Cmd, extra ...string) *exec.Cmd {
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + cmd.Dir, "LANG=C.UTF-8"}, extra...)
		return cmd
	}
	npm := func(retries bool) func(base, dir string) *exec.Cmd {
		return func(base, dir string) *exec.Cmd {
			os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"t","version":"1.0.0","private":true}`), 0o644)
			os.WriteFile(filepath.Join(dir, "user-npmrc"), nil, 0o644)
			os.WriteFile(filepath.Join(dir, "global-npmrc"), nil, 0o644)
			c := exec.Command("npm", "install", "--no-save", "--registry", base+"/", "lockdemo")
			c.Dir = dir
			extra := []string{"npm_config_userconfig=" + dir + "/user-npmrc", "npm_config_globalconfig=" + dir + "/global-npmrc",
				"npm_config_cache=" + dir + "/cache", "npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false"}
			if !retries {
				extra = append(extra, "npm_config_fetch_retries=0")
			}
			return env(c, extra...)
		}
	}
	pip := func(retries bool) func(base, dir string) *exec.Cmd {
		return func(base, dir string) *exec.Cmd {
			args := []string{"-m", "pip", "download", "--no-deps", "--no-cache-dir", "-d", dir, "--index-url", base + "/simple/", "lockdemo"}
			if !retries {
				args = append(args, "--retries", "0")
			}
			c := exec.Command(py, args...)
			c.Dir = dir
			return env(c, "PIP_CONFIG_FILE=/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1")
		}
	}
	script := func(bin string, args ...string) func(base, dir string) *exec.Cmd {
		return func(base, dir string) *exec.Cmd {
			c := exec.Command(bin, append(args, base+"/x")...)
			c.Dir = dir
			return env(c)
		}
	}
	clients := []client{
		{"pip", pip(true), "pip download from an index (defaults: --timeout 15, --retries 5)"},
		{"pip --retries 0", pip(false), "one attempt"},
		{"npm", npm(true), "npm install from a registry (defaults: fetch-timeout 300000, fetch-retries 2)"},
		{"npm fetch-retries=0", npm(false), "one attempt"},
		{"git", func(base, dir string) *exec.Cmd {
			c := exec.Command("git", "ls-remote", base+"/repo.git")
			c.Dir = dir
			return env(c, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1")
		}, "git ls-remote (clone and fetch start so)"},
		{"curl", script("curl", "-sS"), "curl URL"},
		{"python requests", script(py, "-c", "import sys, requests; requests.get(sys.argv[1])"), "requests.get(url)"},
		{"python urllib", script(py, "-c", "import sys, urllib.request; urllib.request.urlopen(sys.argv[1])"), "urllib.request.urlopen(url)"},
		{"python httpx", script(py, "-c", "import sys, httpx; httpx.get(sys.argv[1])"), "httpx.get(url)"},
		{"node fetch", script("node", "-e", "fetch(process.argv[1]).then(r => r.text()).then(console.log, e => { console.error(e.cause || e); process.exit(1) })"), "Node's fetch (undici)"},
		{"node http", script("node", "-e", "require('http').get(process.argv[1], r => r.resume()).on('error', e => { console.error(e); process.exit(1) })"), "Node's http.get"},
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		if n != "" {
			want[n] = true
		}
	}
	type result struct {
		name, note, outcome string
		took                time.Duration
	}
	var results []result
	var rmu sync.Mutex
	var wg sync.WaitGroup
	add := func(r result) {
		rmu.Lock()
		results = append(results, r)
		rmu.Unlock()
		log.Printf("%s: %.1f s, %s", r.name, r.took.Seconds(), r.outcome)
	}
	for _, c := range clients {
		if len(want) > 0 && !want[c.name] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, err := os.MkdirTemp("", "clienttimeouts-")
			if err != nil {
				log.Fatal(err)
			}
			defer os.RemoveAll(dir)
			ctx, cancel := context.WithTimeout(context.Background(), *limit)
			defer cancel()
			cmd := c.cmd(base, dir)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			// The client's children (npm's, git's) go with it, and hold no pipe open after.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.WaitDelay = time.Second
			start := time.Now()
			if err := cmd.Start(); err != nil {
				add(result{c.name, c.note, "not run: " + err.Error(), 0})
				return
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var outcome string
			select {
			case err = <-done:
				outcome = fmt.Sprintf("gave up (%v): %s", err, lastLine(out.String()))
			case <-ctx.Done():
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
				outcome = "still waiting: no timeout of its own"
			}
			add(result{c.name, c.note, outcome, time.Since(start)})
		}()
	}
	if len(want) == 0 || want["go net/http"] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), *limit)
			defer cancel()
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/x", nil)
			// http.DefaultClient, as http.Get uses it; the context only stops the measurement.
			_, err := http.DefaultClient.Do(req)
			outcome := fmt.Sprintf("gave up: %v", err)
			if errors.Is(err, context.DeadlineExceeded) {
				outcome = "still waiting: no timeout of its own"
			}
			add(result{"go net/http", "http.Get(url) (http.DefaultClient)", outcome, time.Since(start)})
		}()
	}
	wg.Wait()
	sort.Slice(results, func(i, j int) bool { return results[i].took < results[j].took })
	fmt.Printf("| Client | What ran | Until it gave up | Outcome |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Printf("| %s | %s | %.1f s | %s |\n", r.name, r.note, r.took.Seconds(), strings.ReplaceAll(r.outcome, "|", "/"))
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("\nRequests the silent origin received:")
	var lines []string
	for l, n := range seen {
		lines = append(lines, fmt.Sprintf("  %dx %s", n, l))
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
}

// silent reads what the client sends and never answers; it reports the first request line.
func silent(c net.Conn, saw func(string)) {
	defer c.Close()
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if n > 0 {
		line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
		saw(line)
	}
	if err != nil {
		return
	}
	io.Copy(io.Discard, c)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 160 {
		l = l[:160] + "…"
	}
	return l
}
