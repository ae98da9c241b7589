package cpu

import (
	"sync"
	"sync/atomic"
	"time"
)

// pool runs a loop's chunks on persistent goroutines, so that splitting an
// op across cores costs a store and a counter bump, not a goroutine start.
// Loops from concurrent Runs share the workers: each call hands out its own
// chunks, and a chunk has no state of the worker that runs it (scratch space
// belongs to the call, see Backend.scratch).
//
// Three things make more cores pay on small ops. A decode step is a few
// hundred ops back to back; a 4-bit matrix of TinyLlama's is ~50 µs of work
// per core at 2 threads and a few µs at 16, and waking a parked goroutine
// (futex, then the scheduler) costs 10-50 µs. So idle workers poll for work
// for a short while (spinFor) before they sleep, as ggml's threads do, and
// stay awake through a forward pass. Polling reads one shared word (gen):
// no lock, so 15 polling workers do not slow the caller that publishes the
// next op (they did when they polled a channel, whose lock they then
// fought over: at 16 threads 4-bit decoding was slower than at 8). And a
// call's rows are cut into several chunks per worker that whoever is
// running takes from a shared counter, the caller included: a worker that
// is late (still waking, or descheduled by another process on a busy
// machine) costs at most its last chunk, not its whole share.
type pool struct {
	n int
	// The latest call is stored in cur, then gen is bumped; a worker that
	// sees gen change runs chunks of cur. A call published while another
	// is running replaces it there: the earlier one is finished by its own
	// caller and the workers that already took it.
	cur atomic.Pointer[call]
	gen atomic.Uint64
	// Workers that stopped polling wait on wake; sleepers counts them, so
	// that a caller takes mu only when one is asleep.
	sleepers atomic.Int32
	mu       sync.Mutex
	wake     *sync.Cond
}

// call is one parallel loop: chunks of size chunk over [0, n), taken in
// order by next, counted by done (on its own cache line: every chunk
// updates both, from every core).
type call struct {
	fn          func(lo, hi int)
	n, chunk    int
	chunks      int32
	next        atomic.Int32
	_           [60]byte
	done        atomic.Int32
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
	p.wake = sync.NewCond(&p.mu)
	for range n - 1 {
		go p.worker()
	}
	return p
}

func (p *pool) worker() {
	var seen uint64
	for {
		seen = p.await(seen)
		if c := p.cur.Load(); c != nil {
			c.work()
		}
	}
}

// await returns the call generation once it differs from seen, polling for
// spinFor and then asleep on wake.
func (p *pool) await(seen uint64) uint64 {
	var deadline time.Time
	for i := 0; ; i++ {
		if g := p.gen.Load(); g != seen {
			return g
		}
		if i%64 == 63 { // reading the clock costs more than a poll
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(spinFor)
			} else if now.After(deadline) {
				break
			}
		}
	}
	// sleepers is raised before gen is read again, and a caller bumps gen
	// before it reads sleepers: either this worker sees the new call or
	// the caller sees a sleeper and broadcasts (under mu, so not before
	// this worker waits).
	p.mu.Lock()
	p.sleepers.Add(1)
	g := p.gen.Load()
	for g == seen {
		p.wake.Wait()
		g = p.gen.Load()
	}
	p.sleepers.Add(-1)
	p.mu.Unlock()
	return g
}

// publish makes c the call idle workers take chunks of.
func (p *pool) publish(c *call) {
	p.cur.Store(c)
	p.gen.Add(1)
	if p.sleepers.Load() > 0 {
		p.mu.Lock()
		p.wake.Broadcast()
		p.mu.Unlock()
	}
}

// work runs chunks of c until none is left.
func (c *call) work() {
	for c.next.Load() < c.chunks { // a read first: workers arriving after the last chunk write nothing
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
	if c.chunks > 1 {
		p.publish(c)
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
