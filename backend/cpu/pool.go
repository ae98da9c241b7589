package cpu

import (
	"sync/atomic"
	"time"
)

// pool runs a loop's chunks on persistent goroutines, so that splitting an
// op across cores costs a channel send per worker, not a goroutine start.
// Loops from concurrent Runs share the workers: each call hands out its own
// chunks, and a chunk has no state of the worker that runs it (scratch space
// belongs to the call, see Backend.scratch).
//
// Two things make a second core pay on small ops. A decode step is a few
// hundred ops back to back; a 4-bit matrix of TinyLlama's is ~50 µs of work
// per core, and waking a parked goroutine (futex, then the scheduler) costs
// 10-50 µs. So idle workers poll for work for a short while (spinFor) before
// they sleep, as ggml's threads do, and stay awake through a forward pass.
// And a call's rows are cut into several chunks per worker that whoever is
// running takes from a shared counter, the caller included: a worker that
// is late (still waking, or descheduled by another process on a busy
// machine) costs at most its last chunk, not its whole share.
type pool struct {
	n    int
	jobs chan *call
}

// call is one parallel loop: chunks of size chunk over [0, n), taken in
// order by next, counted by done.
type call struct {
	fn          func(lo, hi int)
	n, chunk    int
	chunks      int32
	next, done  atomic.Int32
	finished    chan struct{} // closed with the last chunk when the caller sleeps
	callerSleep atomic.Bool
}

// spinFor is how long an idle worker polls for the next op, and a caller for
// the chunks others are running, before sleeping. It spans the gaps between
// the ops of a forward pass, so a generating engine's workers never sleep;
// an idle engine's stop spinning after it.
const spinFor = 50 * time.Microsecond

// chunksPerWorker is how many pieces each worker's share is cut into. More
// pieces balance better when a worker starts late; each costs a counter
// update and, for the kernels, a partial first cache line of weights.
const chunksPerWorker = 4

func newPool(n int) *pool {
	p := &pool{n: n}
	if n > 1 {
		p.jobs = make(chan *call, 4*n)
		for range n - 1 {
			go p.worker()
		}
	}
	return p
}

func (p *pool) worker() {
	for {
		c, ok := p.poll()
		if !ok {
			c = <-p.jobs // nothing for spinFor: sleep until the next op
		}
		c.work()
	}
}

// poll takes the next call without sleeping, trying for spinFor.
func (p *pool) poll() (*call, bool) {
	var deadline time.Time
	for i := 0; ; i++ {
		select {
		case c := <-p.jobs:
			return c, true
		default:
		}
		if i%64 == 63 { // reading the clock costs more than a poll
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(spinFor)
			} else if now.After(deadline) {
				return nil, false
			}
		}
	}
}

// work runs chunks of c until none is left.
func (c *call) work() {
	for {
		i := c.next.Add(1) - 1
		if i >= c.chunks {
			return
		}
		lo := int(i) * c.chunk
		c.fn(lo, min(lo+c.chunk, c.n))
		if c.done.Add(1) == c.chunks && c.callerSleep.Load() {
			close(c.finished)
		}
	}
}

// parallel calls fn over [0,n) in contiguous chunks, each a multiple of align
// long (except the last), and returns when every chunk is done. Loops with
// less than minWork items per worker run inline: for small ops the handoff
// costs more than it saves.
func (p *pool) parallel(n, align, minWork int, fn func(lo, hi int)) {
	workers := p.n
	if workers > 1 && n < minWork*workers {
		workers = max(1, n/max(minWork, 1))
	}
	if workers <= 1 {
		fn(0, n)
		return
	}
	// Chunks of at least minWork items, chunksPerWorker per worker where the
	// loop is long enough.
	pieces := max(workers, min(workers*chunksPerWorker, n/max(minWork, 1)))
	chunk := (n + pieces - 1) / pieces
	chunk = (chunk + align - 1) / align * align
	c := &call{fn: fn, n: n, chunk: chunk, chunks: int32((n + chunk - 1) / chunk), finished: make(chan struct{})}
	for range min(workers-1, int(c.chunks)-1) {
		p.jobs <- c
	}
	c.work()
	// The other chunks are running: spin for them, then sleep until the
	// last one closes finished. The flag is set before the count is read
	// again, so either the caller sees the count complete or the worker
	// that completes it sees the flag.
	var deadline time.Time
	for i := 0; c.done.Load() < c.chunks; i++ {
		if i%64 != 63 {
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(spinFor)
		} else if now.After(deadline) {
			c.callerSleep.Store(true)
			if c.done.Load() < c.chunks {
				<-c.finished
			}
			return
		}
	}
}
