package cpu

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
)

// BandwidthBuffer is the size ReadBandwidth reads by default: 1 GiB, larger
// than the last-level cache of any CPU this runs on, so every pass comes from
// memory, as a decode step's weights do.
const BandwidthBuffer = 1 << 30

// ReadBandwidth measures the machine's streaming read bandwidth, in bytes per
// second, from threads goroutines each locked to an OS thread and summing
// 1 MiB blocks of a buffer of size bytes with kernels.SumSquares (the same
// full-width vector loads as the f16/f32 matrix-vector kernels, with one
// multiply-add per 16 floats, so the loads bound it). The blocks are taken in
// turn from a shared counter, as the decode kernels' chunks are: with fixed
// shares, the thread that started last or read slowest set the time while
// the others idled. Every page of the
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
	const block = 1 << 18 // floats: 1 MiB
	blocks := (n + block - 1) / block
	sink := make([]float32, threads*16) // one cache line per thread
	var fill sync.WaitGroup
	for t := range threads {
		fill.Go(func() {
			for i := t * 1024; i < n; i += threads * 1024 { // one float per 4 KiB page
				buf[i] = 1
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
		var next atomic.Int64
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
				for {
					b := int(next.Add(1) - 1)
					if b >= blocks {
						return
					}
					sink[t*16] += kernels.SumSquares(buf[b*block : min((b+1)*block, n)])
				}
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
