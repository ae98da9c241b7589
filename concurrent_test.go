package redrafter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// The goroutines of TestConcurrentSessions, each with its own script.
const concurrentWorkers = 6

// concurrentScript is what goroutine g runs: Session.Generate over two
// turns of one conversation (the second re-reads the first from the cache),
// or Engine.Generate twice when fresh is set. Greedy and seeded sampling,
// ReDrafter at several beam shapes and both acceptance rules, and
// autoregressive decoding are all running at once.
func concurrentScript(g int) (prompts []string, opt GenerateOptions, fresh bool) {
	starts := []string{"Once upon a time", "", "Lily and Tom went to the park. They saw", "The cat", "One day, a little girl", "Tim had a big red ball"}
	opt = GenerateOptions{MaxTokens: 40}
	sampled := Sampling{Temperature: 0.8, TopP: 0.95}
	switch g % 6 {
	case 0: // greedy ReDrafter, the default beam
	case 1:
		opt.Draft.Off = true
	case 2:
		opt.Draft = DraftOptions{BeamWidth: 3, BeamLength: 4}
	case 3:
		opt.Sampling, opt.Seed = sampled, uint64(g+1)
		opt.Draft = DraftOptions{BeamWidth: 2, BeamLength: 4}
	case 4:
		opt.Sampling, opt.Seed = sampled, uint64(g+1)
		opt.Draft.Off = true
	case 5:
		opt.Sampling, opt.Seed = sampled, uint64(g+1)
		opt.Draft = DraftOptions{BeamWidth: 2, BeamLength: 3, Accept: AcceptApple}
		fresh = true
	}
	return []string{starts[g%len(starts)], " And then"}, opt, fresh
}

// runScript runs goroutine g's script on e; each turn's prompt is the
// conversation so far plus the script's next line.
func runScript(e *Engine, g int) ([]*Result, error) {
	prompts, opt, fresh := concurrentScript(g)
	var s *Session
	if !fresh {
		var err error
		if s, err = e.NewSession(); err != nil {
			return nil, err
		}
		defer s.Close()
	}
	var out []*Result
	conv := ""
	for _, p := range prompts {
		conv += p
		var res *Result
		var err error
		if fresh {
			res, err = e.Generate(context.Background(), conv, opt, nil)
		} else {
			res, err = s.Generate(context.Background(), conv, opt, nil)
		}
		if err != nil {
			return out, fmt.Errorf("goroutine %d, prompt %q: %w", g, conv, err)
		}
		out = append(out, res)
		conv += res.Text
	}
	return out, nil
}

// probeScript runs a Probe over a fixed chain in two parts (the second
// after keeping the first) and returns the logits of the second part.
func probeScript(e *Engine) ([]float32, error) {
	p, err := e.newProbe()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	toks := e.tok.Encode("Once upon a time there was a little dog who liked to run", true)
	half := len(toks) / 2
	if err := p.Forward(toks[:half], nil, nil); err != nil {
		return nil, err
	}
	if err := p.Keep(half); err != nil {
		return nil, err
	}
	logits := make([]float32, (len(toks)-half)*e.cfg.Vocab)
	if err := p.Forward(toks[half:], logits, nil); err != nil {
		return nil, err
	}
	return logits, nil
}

// Sessions of one Engine run on different goroutines at once (each its own
// Session, or Engine.Generate's, or a Probe), over the same weights and the
// same draft head, and every one produces what it produces alone. Run it
// with -race (make test does): before sessions kept their own scratch and
// draft state, the CPU's attention scratch and the drafter's step plans
// were shared, which the race detector reports and which turned outputs
// into <unk>s and NaN logits.
func TestConcurrentSessions(t *testing.T) {
	graph.RegisterForTest(t, "metal-fake-concurrent", func() (graph.Backend, error) {
		return metal.NewFake(metal.Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 4}, metal.Fake{Reference: cpu.NewReference()}), nil
	})
	q4 := ggufQ4(t, randomModel(t, 128, 2, 4, 2, 256, 31), formats.Q4_0)
	q4bit := quantizedModel(t, stories, 4, 32)
	cases := []struct {
		name, path, backend string
		head                func(t *testing.T, e *Engine)
	}{
		{"cpu/stories260K/bundled-head", stories, "cpu", func(t *testing.T, e *Engine) {
			if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
				t.Fatal(err)
			}
		}},
		{"cpu/stories260K/random-head", stories, "cpu", func(t *testing.T, e *Engine) { randomHead(t, e, true, 2, 0, 3) }},
		// Tiles repacked in place at first use, by whichever session gets there first.
		{"cpu/gguf-q4_0/random-head", q4, "cpu", func(t *testing.T, e *Engine) { randomHead(t, e, true, 1, 0, 4) }},
		{"cpu/stories260K-4bit/4bit-head", q4bit, "cpu", func(t *testing.T, e *Engine) { quantizedHead(t, e, true, 2, 0, 5, 4, 32) }},
		{"metal-fake/stories260K/bundled-head", stories, "metal-fake-concurrent", func(t *testing.T, e *Engine) {
			if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open := func() *Engine {
				e, err := Load(c.path, Options{Backend: c.backend})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				c.head(t, e)
				return e
			}
			// What each script gives alone, on an engine of its own.
			ref := open()
			want := make([][]*Result, concurrentWorkers)
			for g := range want {
				var err error
				if want[g], err = runScript(ref, g); err != nil {
					t.Fatal(err)
				}
			}
			wantProbe, err := probeScript(ref)
			if err != nil {
				t.Fatal(err)
			}

			// Every script at once on one fresh engine, so that first uses
			// (plans compiled, weights repacked) race too.
			e := open()
			got := make([][]*Result, concurrentWorkers)
			errs := make([]error, concurrentWorkers+1)
			var gotProbe []float32
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range concurrentWorkers {
				wg.Go(func() {
					<-start
					got[g], errs[g] = runScript(e, g)
				})
			}
			wg.Go(func() {
				<-start
				gotProbe, errs[concurrentWorkers] = probeScript(e)
			})
			close(start)
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			if t.Failed() {
				return
			}
			if b, ok := e.be.(*cpu.Backend); ok {
				inPlace, copies := b.Repacked()
				t.Logf("4-bit weights repacked for the tile kernel during the concurrent run: %d in place, %d copies", inPlace, copies)
			}
			wrong := 0
			for g := range concurrentWorkers {
				for i, w := range want[g] {
					r := got[g][i]
					if !slices.Equal(r.Tokens, w.Tokens) || r.Text != w.Text || r.Reason != w.Reason {
						wrong++
						t.Errorf("goroutine %d turn %d:\n concurrent %q (%s)\n alone      %q (%s)", g, i, r.Text, r.Reason, w.Text, w.Reason)
						continue
					}
					if (r.Stats.Draft == nil) != (w.Stats.Draft == nil) ||
						r.Stats.Draft != nil && (r.Stats.Draft.Steps != w.Stats.Draft.Steps || r.Stats.Draft.Packed != w.Stats.Draft.Packed) {
						wrong++
						t.Errorf("goroutine %d turn %d: the drafts differ from the ones alone", g, i)
					}
				}
			}
			if !slices.Equal(gotProbe, wantProbe) {
				wrong++
				t.Errorf("the probe's logits differ from the ones alone")
			}
			if wrong > 0 {
				t.Errorf("%d of %d outputs differ from their sequential runs", wrong, 2*concurrentWorkers+1)
			}
		})
	}
}
