package main

import (
	"context"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// feedAuditor is the gate's audit writer that also queues each record's summary for the hub, so
// that the terminal shows every decision as it happens. The record is on its way to the audit
// first; the queue never blocks.
type feedAuditor struct {
	*audit.Writer
	q *traffic.Queue
}

func (f feedAuditor) Submit(r *audit.Record) {
	e := traffic.FromRecord(r)
	f.Writer.Submit(r)
	f.q.Add(e)
}

// Append feeds the record's summary, but not an intent's (audit.EventIntent): the request's own
// record follows with its outcome, and the terminal shows each decision once. An intent fed too
// would show every forwarded request twice (the first time with no status) and take half of
// traffic.MaxForwardedPerSecond.
func (f feedAuditor) Append(ctx context.Context, r *audit.Record) error {
	if r.Event == audit.EventIntent {
		return f.Writer.Append(ctx, r)
	}
	e := traffic.FromRecord(r)
	err := f.Writer.Append(ctx, r)
	f.q.Add(e)
	return err
}

func (f feedAuditor) Write(ctx context.Context, r *audit.Record) error {
	e := traffic.FromRecord(r)
	err := f.Writer.Write(ctx, r)
	f.q.Add(e)
	return err
}

// kick signals ch without blocking (ch has room for one signal, which stands for any number).
func kick(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
