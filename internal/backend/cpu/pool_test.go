package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolCoversEveryIndexOnce: every index of a loop is run exactly once, in
// chunks that start at multiples of align, for loop sizes around the chunk
// boundaries, from concurrent callers sharing the workers, with as many
// and with more workers than processors.
func TestPoolCoversEveryIndexOnce(t *testing.T) {
	for _, procs := range []int{1, 2} {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		for _, workers := range []int{2, 3, 8} {
			p := newPool(workers)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for n := 0; n < 300; n += 7 + g {
						for _, align := range []int{1, 8, 16} {
							hits := make([]atomic.Int32, n)
							p.parallel(n, align, 3, func(lo, hi int) {
								if lo%align != 0 || (lo >= hi && n > 0) {
									t.Errorf("chunk [%d,%d) for align %d", lo, hi, align)
								}
								for i := lo; i < hi; i++ {
									hits[i].Add(1)
								}
							})
							for i := range hits {
								if h := hits[i].Load(); h != 1 {
									t.Fatalf("procs %d workers %d n %d align %d: index %d ran %d times", procs, workers, n, align, i, h)
								}
							}
						}
					}
				})
			}
			wg.Wait()
		}
	}
}

// TestPoolCallerSleeps: a chunk that runs longer than the callers' spin
// leaves the caller asleep on the call's channel; the last chunk wakes it.
func TestPoolCallerSleeps(t *testing.T) {
	p := newPool(2)
	for range 20 {
		var ran atomic.Int32
		p.parallel(2, 1, 1, func(lo, hi int) {
			if lo == 1 {
				time.Sleep(3 * spinFor)
			}
			ran.Add(int32(hi - lo))
		})
		if ran.Load() != 2 {
			t.Fatalf("parallel returned after %d of 2 items", ran.Load())
		}
	}
}

// TestPoolWakesSleepingWorkers: workers idle for longer than spinFor sleep;
// the next call wakes every one of them. Each of the 4 chunks waits until
// all 4 have started, so the call completes only if the 3 sleeping workers
// each took one (the caller can run just one at a time).
func TestPoolWakesSleepingWorkers(t *testing.T) {
	p := newPool(4)
	for round := range 3 {
		deadline := time.Now().Add(5 * time.Second)
		for p.sleepers.Load() != 3 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of 3 workers asleep after 5 s", round, p.sleepers.Load())
			}
			time.Sleep(time.Millisecond)
		}
		var started sync.WaitGroup
		started.Add(4)
		all := make(chan struct{})
		go func() { started.Wait(); close(all) }()
		p.parallel(4, 1, 1, func(lo, hi int) {
			started.Done()
			select {
			case <-all:
			case <-time.After(5 * time.Second):
				t.Errorf("round %d: chunk %d waited 5 s for the others: a worker did not wake", round, lo)
			}
		})
	}
}
