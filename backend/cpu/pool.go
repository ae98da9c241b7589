package cpu

import "sync"

// pool runs a loop's chunks on persistent goroutines, so that splitting an
// op across cores costs a channel send per worker, not a goroutine start.
// Loops from concurrent Runs share the workers: each call queues its own
// jobs with its own WaitGroup, and a chunk has no state of the worker that
// runs it (scratch space belongs to the call, see Backend.scratch).
type pool struct {
	n    int
	jobs chan job
}

type job struct {
	fn     func(lo, hi int)
	lo, hi int
	wg     *sync.WaitGroup
}

func newPool(n int) *pool {
	p := &pool{n: n}
	if n > 1 {
		p.jobs = make(chan job, n)
		for range n - 1 {
			go func() {
				for j := range p.jobs {
					j.fn(j.lo, j.hi)
					j.wg.Done()
				}
			}()
		}
	}
	return p
}

// parallel calls fn over [0,n) in contiguous chunks, one per worker, each a
// multiple of align long (except the last), and returns when every chunk is
// done. Loops with less than minWork items per worker run inline: for small
// ops the handoff costs more than it saves.
func (p *pool) parallel(n, align, minWork int, fn func(lo, hi int)) {
	workers := p.n
	if workers > 1 && n < minWork*workers {
		workers = max(1, n/max(minWork, 1))
	}
	if workers <= 1 {
		fn(0, n)
		return
	}
	chunk := (n + workers - 1) / workers
	chunk = (chunk + align - 1) / align * align
	var wg sync.WaitGroup
	lo := chunk // the calling goroutine takes the first chunk
	for lo < n {
		hi := min(lo+chunk, n)
		wg.Add(1)
		p.jobs <- job{fn: fn, lo: lo, hi: hi, wg: &wg}
		lo = hi
	}
	fn(0, min(chunk, n))
	wg.Wait()
}
