package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/seed9b8f47b1/redrafter"
)

// errQueueFull refuses a request at once when every slot is busy and the
// queue holds as many waiting requests as it may.
var errQueueFull = errors.New("server: every slot is busy and the queue is full")

// slot is one sequence the server can decode: a Session whose KV cache
// outlives the request, so that the next request that starts with the same
// tokens (a chat's next turn) only runs what is new.
type slot struct {
	id      int
	session *redrafter.Session
	// lastUse orders idle slots for reuse: among equal prefixes the one
	// unused longest is taken, which keeps recent conversations cached.
	lastUse uint64
	// held is how many tokens the slot's KV cache holds for the request
	// using it: its prompt once it has the slot, then the session's tokens
	// as the generation goes on; 0 while idle, since an idle slot's cached
	// prefix is reused or overwritten at will (vLLM likewise counts
	// cached-but-free blocks as free). The metrics read it concurrently.
	held atomic.Int64
}

// waiter is a request in the queue; the scheduler sends it a slot.
type waiter struct {
	prompt []int32
	got    chan *slot
}

// scheduler admits requests and hands them slots: at once when one is idle,
// else in arrival order through a bounded queue. A request is admitted
// before its prompt is tokenized and counts until its slot is released, so
// that the slots and the queue bound the work in flight, tokenization
// included: at most slots+queue requests are admitted at once.
type scheduler struct {
	mu       sync.Mutex
	idle     []*slot
	queue    []*waiter
	maxWait  int
	admitted int
	clock    uint64
	// onChange reports the queue depth, the busy slots and the admitted
	// requests after each change (metrics, memory at rest).
	onChange func(queued, busy, admitted int)
	total    int
	all      []*slot // every slot, idle or busy (held tokens)
}

func newScheduler(slots []*slot, maxWait int, onChange func(queued, busy, admitted int)) *scheduler {
	if onChange == nil {
		onChange = func(int, int, int) {}
	}
	return &scheduler{idle: slots, maxWait: maxWait, onChange: onChange, total: len(slots), all: slices.Clone(slots)}
}

// admit counts a request in, or fails at once with errQueueFull when
// slots+queue requests are admitted already. The request then calls
// acquire, or leave if it goes no further.
func (s *scheduler) admit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admitted >= s.total+s.maxWait {
		return errQueueFull
	}
	s.admitted++
	s.changedLocked()
	return nil
}

// leave counts out an admitted request that holds no slot: refused after
// admission, or its wait for a slot ended.
func (s *scheduler) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admitted--
	s.changedLocked()
}

// acquire returns the idle slot whose cached tokens share the longest prefix
// with prompt to an admitted request, waits in the queue for one, or fails
// at once with errQueueFull. It returns ctx's error if ctx ends while it
// waits. When it fails the request is still admitted (see leave).
func (s *scheduler) acquire(ctx context.Context, prompt []int32) (*slot, error) {
	s.mu.Lock()
	if len(s.idle) > 0 && len(s.queue) == 0 {
		sl := s.takeBest(prompt)
		sl.held.Store(int64(len(prompt)))
		s.changedLocked()
		s.mu.Unlock()
		return sl, nil
	}
	if len(s.queue) >= s.maxWait {
		s.mu.Unlock()
		return nil, errQueueFull
	}
	w := &waiter{prompt: prompt, got: make(chan *slot, 1)}
	s.queue = append(s.queue, w)
	s.changedLocked()
	s.mu.Unlock()

	select {
	case sl := <-w.got:
		return sl, nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, q := range s.queue {
			if q == w {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				s.changedLocked()
				s.mu.Unlock()
				return nil, context.Cause(ctx)
			}
		}
		// A slot was handed over as ctx ended: give it back.
		s.putBackLocked(<-w.got)
		s.mu.Unlock()
		return nil, context.Cause(ctx)
	}
}

// release returns an admitted request's slot and counts the request out.
func (s *scheduler) release(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admitted--
	s.putBackLocked(sl)
}

// putBackLocked gives a slot to the first waiter, or to the idle set. s.mu
// is held.
func (s *scheduler) putBackLocked(sl *slot) {
	s.clock++
	sl.lastUse = s.clock
	sl.held.Store(0)
	if len(s.queue) > 0 {
		w := s.queue[0]
		s.queue = s.queue[1:]
		sl.held.Store(int64(len(w.prompt)))
		w.got <- sl
		s.changedLocked()
		return
	}
	s.idle = append(s.idle, sl)
	s.changedLocked()
}

// takeBest removes and returns the idle slot with the longest cached prefix
// of prompt, when that prefix is at least half the prompt (a conversation's
// next turn); otherwise the slot unused longest, so that a new conversation
// does not overwrite a recent one's cache for the sake of a shared system
// prompt. s.mu is held.
func (s *scheduler) takeBest(prompt []int32) *slot {
	best, bestLen, lru := 0, -1, 0
	for i, sl := range s.idle {
		if n := commonPrefix(sl.session.Tokens(), prompt); n > bestLen {
			best, bestLen = i, n
		}
		if sl.lastUse < s.idle[lru].lastUse {
			lru = i
		}
	}
	if 2*bestLen < len(prompt) {
		best = lru
	}
	sl := s.idle[best]
	s.idle = append(s.idle[:best], s.idle[best+1:]...)
	return sl
}

func (s *scheduler) changedLocked() {
	s.onChange(len(s.queue), s.total-len(s.idle), s.admitted)
}

// busy reports the slots in use and the requests waiting.
func (s *scheduler) busy() (busy, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total - len(s.idle), len(s.queue)
}

// load is one consistent reading of the scheduler for the metrics: the
// requests waiting, the slots busy, and the tokens the busy slots' caches
// hold.
type load struct {
	queued, busy int
	heldTokens   int64
}

func (s *scheduler) load() load {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := load{queued: len(s.queue), busy: s.total - len(s.idle)}
	for _, sl := range s.all {
		l.heldTokens += sl.held.Load()
	}
	return l
}

// closeAll closes the sessions of the idle slots; the server calls it once
// every request is done, when all of them are idle.
func (s *scheduler) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.idle {
		sl.session.Close()
	}
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
