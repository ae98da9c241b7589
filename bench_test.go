package redrafter

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/graph"
)

// BenchmarkDecodeStories260K measures greedy decoding of 256 tokens from an
// empty prompt on the demo model, single-threaded and on every core.
func BenchmarkDecodeStories260K(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			graph.Register("cpu-bench", func() (graph.Backend, error) { return cpu.New(threads), nil })
			e, err := Load(stories, Options{Backend: "cpu-bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			s, err := e.NewSession()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var tokens int
			var decode float64
			cpu0 := cpuSeconds()
			for b.Loop() {
				res, err := s.Generate(context.Background(), "", GenerateOptions{MaxTokens: 256}, nil)
				if err != nil {
					b.Fatal(err)
				}
				tokens += res.Stats.GeneratedTokens
				decode += res.Stats.Decode.Seconds()
			}
			b.ReportMetric(float64(tokens)/decode, "tok/s")
			// On a shared machine the wall clock counts other processes'
			// time too; CPU time per token is what this process spent.
			if threads == 1 {
				b.ReportMetric(float64(tokens)/(cpuSeconds()-cpu0), "tok/cpu-s")
			}
		})
	}
}

// cpuSeconds is the process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
