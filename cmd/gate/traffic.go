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

func (f feedAuditor) Append(ctx context.Context, r *audit.Record) error {
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
