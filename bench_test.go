package redrafter

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// BenchmarkDecodeStories260K measures greedy decoding of 256 tokens from an
// empty prompt on the demo model, single-threaded and on every core.
func BenchmarkDecodeStories260K(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			graph.RegisterForTest(b, "cpu-bench", func() (graph.Backend, error) { return cpu.New(threads), nil })
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

// BenchmarkGroupDecode measures aggregate greedy decoding, in generated
// tokens per second of wall time, of 1 session alone and of 4 sessions of
// one Group generating at once (different prompts, 32 tokens each), with
// ReDrafter off and on (the CPU's default beam), on the demo model and, if
// it was built (`redrafter dev inflate ... --out .cache/tinyllama-shaped-f16.gguf`),
// on the TinyLlama-shaped f16 model with its inflated head. Run it with
// -benchtime=1x on a quiet machine; groupRows reports the rows per pass.
func BenchmarkGroupDecode(b *testing.B) {
	models := []struct{ name, path, head string }{
		{"stories260K", stories, "models/stories260K/drafter"},
		{"tinyllama-shaped-f16", ".cache/tinyllama-shaped-f16.gguf", ".cache/tinyllama-shaped-f16-drafter"},
	}
	prompts := []string{"Once upon a time", "Lily and Tom went to the park. They saw", "The cat", "One day, a little girl"}
	for _, m := range models {
		b.Run(m.name, func(b *testing.B) {
			if _, err := os.Stat(m.path); err != nil {
				b.Skip("not built:", m.path)
			}
			e, err := Load(m.path, Options{Backend: "cpu", Context: 512})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if err := e.LoadDrafter(m.head); err != nil {
				b.Fatal(err)
			}
			// Autoregressive decoding, then ReDrafter with the engine's beam
			// (W=1, L=5 on the CPU) under the group's row budget (the
			// default) and with none (the beam kept whatever the load).
			for _, mode := range []string{"off", "budget", "nobudget"} {
				for _, n := range []int{1, 4} {
					if mode == "nobudget" && n == 1 {
						continue // a member alone keeps its beam anyway
					}
					b.Run(fmt.Sprintf("redrafter=%s/sessions=%d", mode, n), func(b *testing.B) {
						opt := GenerateOptions{MaxTokens: 32, Draft: DraftOptions{Off: mode == "off"}}
						g := e.NewGroup()
						defer g.Close()
						if mode == "nobudget" {
							g.SetRowBudget(0)
						}
						sessions := make([]*Session, n)
						for i := range sessions {
							if n == 1 {
								sessions[i], err = e.NewSession() // the baseline: no group at all
							} else {
								sessions[i], err = g.NewSession()
							}
							if err != nil {
								b.Fatal(err)
							}
							defer sessions[i].Close()
						}
						// Warm up: the weights' pages, the plans of every shape.
						for i, s := range sessions {
							if _, err := s.Generate(context.Background(), prompts[i], opt, nil); err != nil {
								b.Fatal(err)
							}
						}
						var tokens int
						var wall, drafting, verifying time.Duration
						before := g.Stats()
						for b.Loop() {
							start := time.Now()
							var mu sync.Mutex
							var wg sync.WaitGroup
							for i, s := range sessions {
								wg.Go(func() {
									res, err := s.Generate(context.Background(), prompts[i], opt, nil)
									if err != nil {
										b.Error(err)
										return
									}
									mu.Lock()
									tokens += res.Stats.GeneratedTokens
									if d := res.Stats.Draft; d != nil {
										drafting += d.Draft
										verifying += d.Verify
									}
									mu.Unlock()
								})
							}
							wg.Wait()
							wall += time.Since(start)
						}
						b.ReportMetric(float64(tokens)/wall.Seconds(), "tok/s")
						if st := g.Stats(); st.Passes > before.Passes {
							passes := float64(st.Passes - before.Passes)
							b.ReportMetric(float64(st.Rows-before.Rows)/passes, "rows/pass")
							b.ReportMetric(float64(st.Compiles-before.Compiles)/passes, "compiles/pass")
						}
						if mode != "off" {
							// Shares of each session's time: drafting (its own beam
							// search) and verifying (the forward pass, waits included).
							per := float64(n) * wall.Seconds()
							b.ReportMetric(drafting.Seconds()/per, "draft-share")
							b.ReportMetric(verifying.Seconds()/per, "verify-share")
						}
					})
				}
			}
		})
	}
}
