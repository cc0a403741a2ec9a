package mcp

import (
	"bytes"
	"errors"
	"fmt"
)

// MaxEvent is the largest server-sent event a Stream holds to read or cut, in bytes as
// received.
const MaxEvent = 8 << 20

// ErrEventTooLarge: an event of a stream that is being cut is larger than the limit.
var ErrEventTooLarge = errors.New("a server-sent event over the size limit")

// Event is one server-sent event as an event stream's reader dispatches it.
type Event struct {
	// Raw is the event's bytes as received, from the end of the event before to the end of the
	// blank line that ends it: comments, fields and line ends as sent. Kept only while cutting.
	Raw  []byte
	Type string // the "event" field ("" is "message")
	ID   string // the "id" field
	// Data is the "data" fields' values joined with "\n"; HasData is false for an event of
	// comments or other fields alone, which a reader dispatches as nothing.
	Data    []byte
	HasData bool
}

// sseReader splits a text/event-stream into events, fed in pieces of any size: a line end may
// be CRLF, LF or CR, and a CRLF split between two pieces is one line end.
type sseReader struct {
	max     int
	keepRaw bool
	raw     []byte // the current event's bytes so far (keepRaw)
	line    []byte // the current line so far, without its end
	size    int    // the current event's bytes so far
	cr      bool   // the last piece ended with a CR: its line ends once the next byte is known
	first   bool   // past the stream's first line (whose byte-order mark is dropped)
	over    bool   // the current event is over max and is skipped
	ev      Event
	data    bytes.Buffer
	odd     []string // what readers split differently, for the report
}

// feed reads p and calls emit with each event it completes. Over max, an event is an error when
// keepRaw; else it is skipped, and skip is called at its end. A line that ends with a CR at the
// end of p is ended once the next byte is known, so that the LF of a CRLF split between two
// pieces stays with its event.
func (r *sseReader) feed(p []byte, emit func(*Event) error, skip func()) error {
	for len(p) > 0 {
		if r.cr {
			r.cr = false
			if p[0] == '\n' {
				r.take(p[:1])
				p = p[1:]
			} else {
				r.oddLine("a lone CR ends a line")
			}
			if err := r.endLine(emit, skip); err != nil {
				return err
			}
			continue
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			r.take(p)
			if !r.over {
				r.line = append(r.line, p...)
			}
			return r.check()
		}
		end := i + 1
		pendingCR := false
		if p[i] == '\r' {
			switch {
			case i+1 == len(p):
				pendingCR = true
			case p[i+1] == '\n':
				end = i + 2
			default:
				r.oddLine("a lone CR ends a line")
			}
		}
		r.take(p[:end])
		if !r.over {
			r.line = append(r.line, p[:i]...)
		}
		p = p[end:]
		if err := r.check(); err != nil {
			return err
		}
		if pendingCR {
			r.cr = true
			return nil
		}
		if err := r.endLine(emit, skip); err != nil {
			return err
		}
	}
	return nil
}

// finish ends the stream: a line waiting on its CR is ended, and an event begun and not ended is
// returned when it holds data (readers differ on whether to dispatch it; a Stream reads it as an
// event). Otherwise the bytes left over are returned in Raw, with ok false.
func (r *sseReader) finish(emit func(*Event) error, skip func()) (Event, bool, error) {
	if r.cr {
		r.cr = false
		if err := r.endLine(emit, skip); err != nil {
			return Event{}, false, err
		}
	}
	if len(r.line) > 0 {
		// A last line without its line end: read as if ended, without dispatching.
		line := append([]byte(nil), r.line...)
		r.line = r.line[:0]
		if !r.over && line[0] != ':' {
			name, value, _ := bytes.Cut(line, []byte{':'})
			if string(name) == "data" {
				if r.ev.HasData {
					r.data.WriteByte('\n')
				}
				r.ev.HasData = true
				r.data.Write(bytes.TrimPrefix(value, []byte{' '}))
			}
		}
	}
	if r.over || !r.ev.HasData {
		return Event{Raw: r.raw}, false, nil
	}
	ev := r.ev
	ev.Data = r.data.Bytes()
	ev.Raw = r.raw
	return ev, true, nil
}

// take counts bytes of the current event and keeps them when the raw event is kept.
func (r *sseReader) take(b []byte) {
	r.size += len(b)
	if r.keepRaw && !r.over {
		r.raw = append(r.raw, b...)
	}
}

// check holds the current event to the limit.
func (r *sseReader) check() error {
	if r.size <= r.max || r.over {
		return nil
	}
	if r.keepRaw {
		return ErrEventTooLarge
	}
	r.over = true
	r.data.Reset()
	r.line = r.line[:0]
	return nil
}

func (r *sseReader) oddLine(what string) {
	if len(r.odd) < MaxFindings {
		r.odd = append(r.odd, what)
	}
}

// endLine handles the line just ended.
func (r *sseReader) endLine(emit func(*Event) error, skip func()) error {
	line := r.line
	r.line = r.line[:0]
	if !r.first {
		r.first = true
		line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
	}
	if len(line) == 0 {
		return r.dispatch(emit, skip)
	}
	if r.over || line[0] == ':' {
		return nil
	}
	name, value, found := bytes.Cut(line, []byte{':'})
	if !found {
		r.oddLine("a line without a colon")
	}
	value = bytes.TrimPrefix(value, []byte{' '})
	switch string(name) {
	case "data":
		if r.ev.HasData {
			r.data.WriteByte('\n')
		}
		r.ev.HasData = true
		r.data.Write(value)
	case "event":
		r.ev.Type = string(value)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.ev.ID = string(value)
		}
	}
	return nil
}

// dispatch ends the current event.
func (r *sseReader) dispatch(emit func(*Event) error, skip func()) error {
	ev := r.ev
	ev.Data = r.data.Bytes()
	ev.Raw = r.raw
	over := r.over
	r.ev, r.over, r.size = Event{}, false, 0
	var err error
	switch {
	case over:
		if skip != nil {
			skip()
		}
	default:
		err = emit(&ev)
	}
	r.data.Reset()
	r.raw = r.raw[:0]
	return err
}

// Stream reads a text/event-stream answer fed in pieces: every event's data is read as Filter.JSON
// reads a JSON answer. With Lists set it cuts: each event is held until it ends and is passed
// on as received, or rewritten when it carries a cut tools/list result; an event over the limit,
// or one that cannot be read one way only, is an error, and the caller ends the answer with a
// refusal. Without Lists it only reads: every byte is passed on at once, and an event over the
// limit is passed on unread, counted in the report.
type Stream struct {
	f   Filter
	cut bool
	r   sseReader
	rep Report
	err error
}

// Stream returns a Stream that reads with f, holding at most maxEvent bytes of one event
// (MaxEvent when zero or less).
func (f *Filter) Stream(maxEvent int) *Stream {
	if maxEvent <= 0 {
		maxEvent = MaxEvent
	}
	s := &Stream{f: *f, cut: len(f.Lists) > 0}
	s.r = sseReader{max: maxEvent, keepRaw: s.cut}
	return s
}

// Feed reads p and appends to dst what is to be passed on now, and returns it. After an error
// every call returns the same error.
func (s *Stream) Feed(dst, p []byte) ([]byte, error) {
	if s.err != nil {
		return dst, s.err
	}
	if !s.cut {
		dst = append(dst, p...)
	}
	emit, skip := s.callbacks(&dst)
	err := s.r.feed(p, emit, skip)
	if err != nil {
		s.err = err
	}
	return dst, err
}

// End reads the end of the stream: an event begun and not ended is read as one, and its bytes,
// when held, are appended to dst.
func (s *Stream) End(dst []byte) ([]byte, error) {
	if s.err != nil {
		return dst, s.err
	}
	emit, skip := s.callbacks(&dst)
	ev, ok, err := s.r.finish(emit, skip)
	if err != nil {
		s.err = err
		return dst, err
	}
	if !ok {
		if s.cut {
			dst = append(dst, ev.Raw...)
		}
		return dst, nil
	}
	s.rep.finding("the stream ends inside an event; readers differ on whether it counts")
	out, err := s.event(&ev)
	if s.cut {
		dst = append(dst, out...)
	}
	if err != nil {
		s.err = err
	}
	return dst, err
}

// callbacks are the reader's emit and skip, passing on to *dst.
func (s *Stream) callbacks(dst *[]byte) (func(*Event) error, func()) {
	return func(ev *Event) error {
			out, err := s.event(ev)
			if s.cut {
				*dst = append(*dst, out...)
			}
			return err
		}, func() {
			s.rep.finding("an event over %d bytes was passed on unread", s.r.max)
		}
}

// Report is what was read so far.
func (s *Stream) Report() Report {
	rep := s.rep
	for _, o := range s.r.odd {
		rep.finding("the event stream has %s; readers split such a stream differently", o)
	}
	return rep
}

// event reads one event and returns the bytes to pass on for it when cutting.
func (s *Stream) event(ev *Event) ([]byte, error) {
	if s.cut && len(s.r.odd) > 0 {
		return nil, fmt.Errorf("%w: the event stream has %s", ErrAmbiguousAnswer, s.r.odd[0])
	}
	if !ev.HasData {
		return ev.Raw, nil
	}
	out, err := s.f.read(ev.Data, &s.rep)
	if err != nil {
		return nil, err
	}
	if !s.cut || bytes.Equal(out, ev.Data) {
		return ev.Raw, nil
	}
	// The event anew, its type and id kept, its data on as many lines as it holds.
	var b []byte
	if ev.Type != "" {
		b = append(append(append(b, "event: "...), ev.Type...), '\n')
	}
	if ev.ID != "" {
		b = append(append(append(b, "id: "...), ev.ID...), '\n')
	}
	for line := range bytes.SplitSeq(out, []byte{'\n'}) {
		b = append(append(append(b, "data: "...), line...), '\n')
	}
	return append(b, '\n'), nil
}
