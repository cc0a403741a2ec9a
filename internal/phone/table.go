package phone

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
)

// Table writes the paired devices as the terminal shows them (lox phones, the console's
// :phones): a header, then one line each, oldest first, every field escaped. now dates the ages.
func Table(w io.Writer, ss []Session, now time.Time) {
	if len(ss) == 0 {
		fmt.Fprintln(w, "no paired phones (pair one with lox pair, or p in the terminal)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tPAIRED\tLAST SEEN\tADDRESS")
	for _, s := range ss {
		e := func(v string) string { return display.Escape(v, false) }
		seen := ago(now, s.LastSeen)
		if s.Sockets > 0 {
			seen += " (page open)"
		}
		addr := e(s.LastRemote)
		if s.LastRemote == "" {
			addr = e(s.Remote)
		} else if s.Remote != "" && s.Remote != s.LastRemote {
			addr += " (paired from " + e(s.Remote) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e(s.Device), e(s.ID), stamp(now, s.Created), seen, addr)
	}
	tw.Flush()
	fmt.Fprintln(w, "lox unpair ID (or :unpair ID in the terminal) revokes one at once")
}

// stamp is t in local time: the time of day for today, the date too for older.
func stamp(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	lt, ln := t.Local(), now.Local()
	if lt.YearDay() == ln.YearDay() && lt.Year() == ln.Year() {
		return lt.Format("15:04:05")
	}
	return lt.Format("2006-01-02 15:04")
}

// ago is how long before now t was, in its largest unit.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}
