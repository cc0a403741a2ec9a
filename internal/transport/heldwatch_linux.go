package transport

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// heldWatch is the process's one watch of held connections (heldwatch.go).
var heldWatch goneWatch

// goneWatch calls each watched connection's gone once its peer closed or reset it.
type goneWatch struct {
	start sync.Once
	epfd  int   // the epoll set; set by start
	err   error // why there is no watch; set by start

	mu      sync.Mutex
	next    int32            // guarded by mu: the next id to try
	watches map[int32]func() // guarded by mu: id (the epoll event's data) → gone
}

// goneEvents are what says the peer is gone; EPOLLONESHOT reports each socket once.
const goneEvents = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR | unix.EPOLLONESHOT

// add watches tc and calls gone (once, from the watch's goroutine) when its peer closed or reset
// it; stop ends the watch, after which gone is not called. ok is false when tc cannot be watched
// (no watch on this system, or the connection is closed): the caller watches some other way.
func (w *goneWatch) add(tc *net.TCPConn, gone func()) (stop func(), ok bool) {
	w.start.Do(w.open)
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, false
	}
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return nil, false
	}
	id := w.next
	for w.watches[id] != nil {
		id++
	}
	w.next = id + 1
	w.watches[id] = gone
	w.mu.Unlock()
	forget := func() {
		w.mu.Lock()
		delete(w.watches, id)
		w.mu.Unlock()
	}
	var cerr error
	// Control holds the descriptor open: it is not closed (and its number not reused) under it.
	err = rc.Control(func(fd uintptr) {
		cerr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: goneEvents, Fd: id})
	})
	if err != nil || cerr != nil {
		forget()
		return nil, false
	}
	return func() {
		forget()
		// A socket closed meanwhile has left the set with its last descriptor.
		rc.Control(func(fd uintptr) { unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(fd), nil) })
	}, true
}

// open makes the epoll set and starts the goroutine that waits on it.
func (w *goneWatch) open() {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err == nil {
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		w.err = err
		return
	}
	// Non-blocking, the set is registered with the runtime's poller: the goroutine waiting on
	// it holds no thread.
	f := os.NewFile(uintptr(fd), "held-watch")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		w.err = err
		return
	}
	w.epfd = fd
	w.watches = map[int32]func(){}
	go w.run(f, rc)
}

// run waits for the set for the process's life and calls the gone of each socket it reports.
func (w *goneWatch) run(f *os.File, rc syscall.RawConn) {
	defer f.Close() // never: the watch lasts as long as the process; f stays reachable
	var events [64]unix.EpollEvent
	for {
		var n int
		var werr error
		err := rc.Read(func(fd uintptr) bool {
			n, werr = unix.EpollWait(int(fd), events[:], 0)
			if errors.Is(werr, unix.EINTR) {
				n, werr = 0, nil
				return true
			}
			return n != 0 || werr != nil
		})
		if err != nil || werr != nil {
			w.fail(errors.Join(err, werr))
			return
		}
		for _, ev := range events[:n] {
			w.mu.Lock()
			gone := w.watches[ev.Fd]
			delete(w.watches, ev.Fd)
			w.mu.Unlock()
			if gone != nil {
				gone()
			}
		}
	}
}

// fail ends the watch after an error of the set (none is expected): the connections it watched
// are taken as gone, which ends their holds with E_PENDING, and later holds watch by reading.
func (w *goneWatch) fail(err error) {
	w.mu.Lock()
	w.err = err
	all := w.watches
	w.watches = map[int32]func(){}
	w.mu.Unlock()
	for _, gone := range all {
		gone()
	}
}
