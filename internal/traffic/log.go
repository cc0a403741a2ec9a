package traffic

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/lockhttp/lockhttp/internal/httpjson"
)

// DefaultSize is how many entries a Log keeps by default.
const DefaultSize = 1000

// maxBody bounds a batch's body: MaxBatch entries at their bounds fit.
const maxBody = 2 << 20

// Log keeps the latest entries the gate sent, for the terminal UI. It is safe for concurrent
// use.
type Log struct {
	size int

	mu      sync.Mutex
	entries []Entry                // guarded by mu: the latest, oldest first, at most size
	dropped int                    // guarded by mu: entries the gate reported it could not send
	sampled int                    // guarded by mu: forwarded requests the gate left out (Batch.Sampled)
	subs    map[chan struct{}]bool // guarded by mu
}

// NewLog returns a log that keeps the latest size entries (DefaultSize when size ≤ 0).
func NewLog(size int) *Log {
	if size <= 0 {
		size = DefaultSize
	}
	return &Log{size: size, subs: map[chan struct{}]bool{}}
}

// Add takes a batch from the gate and tells the subscribers.
func (l *Log) Add(b Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// In the order the gate sent them (one sender, a failed batch first again): the order the
	// requests finished in.
	for _, e := range b.Entries {
		l.entries = append(l.entries, e.bounded())
	}
	if over := len(l.entries) - l.size; over > 0 {
		l.entries = append(l.entries[:0], l.entries[over:]...)
	}
	l.dropped += max(0, b.Dropped)
	l.sampled += max(0, b.Sampled)
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default: // a signal is waiting already
		}
	}
}

// Recent is the latest n entries f shows, the last one the gate sent first (every one it has when n ≤ 0).
func (l *Log) Recent(n int, f Filter) []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Entry
	for i := len(l.entries) - 1; i >= 0 && (n <= 0 || len(out) < n); i-- {
		if f.Match(l.entries[i]) {
			out = append(out, l.entries[i])
		}
	}
	return out
}

// Dropped is how many entries the gate could not send, in all.
func (l *Log) Dropped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Sampled is how many forwarded requests the gate left out of the live view, in all.
func (l *Log) Sampled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sampled
}

// Subscribe returns a channel that receives a signal after entries were added (one signal
// stands for any number of batches) and a function that ends the subscription and closes it.
func (l *Log) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.subs[ch] = true
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.subs[ch] {
			delete(l.subs, ch)
			close(ch)
		}
	}
}

// Handler takes the gate's batches: POST a Batch as JSON (at most MaxBatch entries, 2 MiB, no
// unknown fields) → 204. It does not check who is calling: mount it behind the gate's token
// (hub.GateOnly).
func (l *Log) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(msg string) { httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": msg}) }
		if r.Method != http.MethodPost {
			httpjson.Write(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST a batch of traffic entries"})
			return
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			refuse("the batch could not be read")
			return
		}
		if len(data) > maxBody {
			refuse("the batch is larger than 2 MiB; send at most 256 entries at a time")
			return
		}
		var b Batch
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			refuse("bad traffic batch: " + err.Error())
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			refuse("bad traffic batch: data after the JSON object")
			return
		}
		if len(b.Entries) > MaxBatch {
			refuse("a traffic batch carries at most 256 entries")
			return
		}
		l.Add(b)
		w.WriteHeader(http.StatusNoContent)
	})
}
