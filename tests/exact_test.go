package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/metaltest"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// Greedy generation from an empty prompt through the Go API reproduces
// llama2.c's 256 tokens byte for byte, streamed and returned alike.
func TestGoldenGreedyStories260K(t *testing.T) {
	e, err := redrafter.Load(stories, redrafter.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var streamed strings.Builder
	res, err := e.Generate(context.Background(), "", redrafter.GenerateOptions{MaxTokens: 256}, func(s string) error {
		streamed.WriteString(s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := goldenGreedy(t); res.Text != want {
		t.Errorf("greedy text differs from llama2.c's:\n got: %q\nwant: %q", res.Text, want)
	}
	if streamed.String() != res.Text {
		t.Errorf("streamed text differs from the result")
	}
	if len(res.Tokens) != 256 || res.Reason != redrafter.StopLength {
		t.Errorf("got %d tokens, reason %s; want 256, %s", len(res.Tokens), res.Reason, redrafter.StopLength)
	}
}

// The Metal backend's encoder over the fake device (dispatch groups run by
// the CPU reference in reverse order, so a missing barrier shows), with
// small command buffers and matvec up to 4 rows so that both kernel families
// and buffer boundaries are crossed.
func init() {
	graph.Register("metal-fake", func() (graph.Backend, error) {
		return metal.NewFake(metal.Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 4}, metal.Fake{Reference: cpu.NewReference()}), nil
	})
	// The CPU at other thread counts than the machine's: rows split over a
	// different number of workers must not change a bit (1 thread, and 3,
	// more workers than this machine's cores and an odd split).
	for _, threads := range []int{1, 3} {
		graph.Register(fmt.Sprintf("cpu-%dthreads", threads), func() (graph.Backend, error) { return cpu.New(threads), nil })
	}
}

// generate loads the demo model on a backend and decodes n tokens greedily,
// with ReDrafter at w×l when head is not empty.
func generate(t *testing.T, backend, kv, head string, w, l int, prompt string, n int) *redrafter.Result {
	t.Helper()
	e, err := redrafter.Load(stories, redrafter.Options{Backend: backend, KVCache: kv})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	opt := redrafter.GenerateOptions{MaxTokens: n}
	if head != "" {
		if err := e.LoadDrafter(head); err != nil {
			t.Fatal(err)
		}
		opt.Draft = redrafter.DraftOptions{BeamWidth: w, BeamLength: l}
	} else {
		opt.Draft.Off = true
	}
	res, err := e.Generate(context.Background(), prompt, opt, nil)
	if err != nil {
		t.Fatalf("%s: %v", backend, err)
	}
	return res
}

// randomHead saves a random draft head for stories260K (and the random
// models of its shape in qwen3_test.go): its drafts are mostly rejected, which exercises tree verification and KV compaction on
// every step.
func randomHead(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "random-head")
	h := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 7)
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// emulated marks t parallel and registers for it the Metal backend over
// the fake device with every dispatch run by its kernel, compiled as C++
// and run on the CPU (metaltest), under a name of t's own, which it
// returns. Emulated runs are most of this package's time, and make test's
// last minutes are often this package's alone on one of two cores: they
// run in parallel, so none may share a name (a test's cleanup would remove
// another's backend). Without clang++ t is skipped, or fails under CI.
func emulated(t *testing.T) string {
	t.Helper()
	t.Parallel()
	metaltest.NewEmulator(t, nil) // skips or fails here, on t's goroutine
	name := "metal-emu-" + t.Name()
	graph.RegisterForTest(t, name, func() (graph.Backend, error) { return metaltest.NewEmulated(t), nil })
	return name
}

// Greedy ReDrafter equals greedy autoregressive decoding on the CPU, token
// for token, on every backend that runs here (the CPU at its default, 1 and
// 3 threads), with the bundled (mostly
// accepted) and a random (mostly rejected) draft head, at several beam
// shapes and both KV cache types. Metal's emulated kernels decode only 16
// tokens (each dispatch runs as a process), two of the four drafts per KV
// type under make test (all four under make test-all,
// REDRAFTER_TEST_FULL); -short skips them.
func TestGreedyReDrafterEqualsAutoregressiveOnEveryBackend(t *testing.T) {
	t.Parallel()
	const n, emuTokens = 48, 16
	prompt := "Once upon a time"
	random := randomHead(t)
	for _, kv := range []string{"f32", "f16"} {
		want := generate(t, "cpu", kv, "", 0, 0, prompt, n).Tokens
		if len(want) != n {
			t.Fatalf("cpu %s: %d tokens, want %d", kv, len(want), n)
		}
		for _, be := range []struct {
			name string
			n    int
		}{{"cpu", n}, {"cpu-1threads", n}, {"cpu-3threads", n}, {"metal-fake", n}, {"metal-emu", emuTokens}} {
			t.Run(be.name+"/"+kv, func(t *testing.T) {
				backend := be.name
				if be.name == "metal-emu" {
					if testing.Short() {
						t.Skip("about 20 s of emulated dispatches")
					}
					backend = emulated(t)
				}
				want := want[:be.n]
				if got := generate(t, backend, kv, "", 0, 0, prompt, be.n).Tokens; !slices.Equal(got, want) {
					t.Errorf("autoregressive: %v\ncpu: %v", got, want)
				}
				drafts := []struct {
					head string
					w, l int
				}{{storiesHead, 1, 5}, {storiesHead, 3, 4}, {random, 3, 4}, {random, 4, 3}}
				if be.name == "metal-emu" {
					// make test: one head a KV type, each head once, each
					// shape once; make test-all: all four.
					if kv == "f32" {
						drafts = testenv.Subset(drafts, 0, 3)
					} else {
						drafts = testenv.Subset(drafts, 1, 2)
					}
				}
				for _, c := range drafts {
					t.Run(fmt.Sprintf("%s/W%dL%d", filepath.Base(c.head), c.w, c.l), func(t *testing.T) {
						res := generate(t, backend, kv, c.head, c.w, c.l, prompt, be.n)
						if !slices.Equal(res.Tokens, want) {
							t.Errorf("ReDrafter: %v\nautoregressive on the cpu: %v", res.Tokens, want)
						}
						if res.Stats.Draft == nil || res.Stats.Draft.Steps == 0 {
							t.Fatalf("no ReDrafter steps in the stats: %+v", res.Stats)
						}
						// The bundled head must actually draft: if it never got a
						// token accepted this test would check nothing.
						if c.head == storiesHead && res.Stats.Draft.TokensPerStep() < 2 {
							t.Errorf("the bundled head accepted %.2f tokens per step, want >= 2", res.Stats.Draft.TokensPerStep())
						}
					})
				}
			})
		}
	}
}
