package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/phone"
)

// runPhones is lox phones: the paired phones, with their name, id, when they paired, when they
// were last seen and from where.
func runPhones(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox phones", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHubFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON array of the paired phones, oldest first")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "lox phones: unexpected argument %q; to revoke a phone, lox unpair ID\n", pos[0])
		return 2
	}
	f, err := hf.facade()
	if err != nil {
		fmt.Fprintln(stderr, "lox phones:", err)
		return 1
	}
	ps, err := f.Phones(context.Background())
	if err != nil {
		fmt.Fprintln(stderr, "lox phones:", err)
		return 1
	}
	if *asJSON {
		if ps == nil {
			ps = []hubclient.Phone{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(ps)
		return 0
	}
	ss := make([]phone.Session, len(ps))
	for i, p := range ps {
		ss[i] = phone.Session(p)
	}
	phone.Table(stdout, ss, time.Now())
	return 0
}

// runUnpair is lox unpair ID: the phone's token stops working at once and its open page is
// closed; the console audits it.
func runUnpair(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox unpair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHubFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: lox unpair [--state DIR] ID (the id lox phones shows)")
		return 2
	}
	if err := hubclient.CheckPhoneID(pos[0]); err != nil {
		fmt.Fprintln(stderr, "lox unpair:", err)
		return 2
	}
	f, err := hf.facade()
	if err != nil {
		fmt.Fprintln(stderr, "lox unpair:", err)
		return 1
	}
	p, err := f.Unpair(context.Background(), pos[0], whoami())
	if err != nil {
		fmt.Fprintln(stderr, "lox unpair:", err)
		return 1
	}
	fmt.Fprintf(stdout, "unpaired %s (%s): its token no longer works and its open page was closed\n",
		display.Escape(p.Device, false), display.Escape(p.ID, false))
	return 0
}
