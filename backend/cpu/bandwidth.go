package cpu

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/seed9b8f47b1/redrafter/backend/cpu/kernels"
)

// BandwidthBuffer is the size ReadBandwidth reads by default: 1 GiB, larger
// than the last-level cache of any CPU this runs on, so every pass comes from
// memory, as a decode step's weights do.
const BandwidthBuffer = 1 << 30

// ReadBandwidth measures the machine's streaming read bandwidth, in bytes per
// second, from threads goroutines each locked to an OS thread and summing its
// own contiguous share of a buffer of size bytes with kernels.SumSquares (the
// same full-width vector loads as the f16/f32 matrix-vector kernels, with
// one multiply-add per 16 floats, so the loads bound it). Every page of the
// buffer is written first: pages that were never written all map the
// kernel's one zero page, which reads from cache at several times the
// memory's speed. The best
// of a few passes is the figure, as a decode step streams weights that are
// already resident.
//
// Decoding cannot read faster than this, so a decode rate divided by it (bytes
// a token reads / this) is how close the kernels come to the machine's limit.
// The figure changes with the machine's state (frequency, other load, and on
// some machines from day to day), so measure it in the same run as the rate.
func ReadBandwidth(ctx context.Context, threads, size int) (float64, error) {
	if threads < 1 {
		return 0, errors.New("cpu: read bandwidth needs at least one thread")
	}
	const passes = 4
	n := size / 4
	n -= n % (16 * threads)
	if n < 16*threads {
		return 0, errors.New("cpu: read bandwidth buffer too small")
	}
	buf := make([]float32, n)
	chunk := n / threads
	sink := make([]float32, threads*16) // one cache line per thread
	var fill sync.WaitGroup
	for t := range threads {
		fill.Go(func() {
			part := buf[t*chunk : (t+1)*chunk]
			for i := 0; i < len(part); i += 1024 { // one float per 4 KiB page
				part[i] = 1
			}
		})
	}
	fill.Wait()
	best := time.Duration(0)
	for range passes {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var start sync.WaitGroup // every reader is on its thread before the clock starts
		var done sync.WaitGroup
		start.Add(1)
		done.Add(threads)
		ready := make(chan struct{}, threads)
		for t := range threads {
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				defer done.Done()
				ready <- struct{}{}
				start.Wait()
				part := buf[t*chunk : (t+1)*chunk]
				sink[t*16] += kernels.SumSquares(part)
			}()
		}
		for range threads {
			<-ready
		}
		t0 := time.Now()
		start.Done()
		done.Wait()
		d := time.Since(t0)
		if best == 0 || d < best {
			best = d
		}
	}
	runtime.KeepAlive(sink)
	return float64(n*4) / best.Seconds(), nil
}
