package drafter

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/sample"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// graph.AcceptChains (the CPU reference op) is the reference's greedy rule
// on the beams in the caller's order (refGreedy: the first beam with the
// longest agreement), and emits what AcceptGreedy emits over the merged
// tree, for random beams with repeated prefixes and an LLM whose argmax
// depends on the prefix alone (as a real one's does) and often follows a
// beam.
func TestAcceptChainsIsTheReferenceRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	be := cpu.NewReference()
	accepted := 0
	for trial := range 300 {
		w, l, v := 1+rng.IntN(6), 2+rng.IntN(4), 2+rng.IntN(3)
		beams := randomBeams(rng, w, l, v)
		memo := map[string]int32{}
		llm := func(prefix []int32) int32 { // the argmax after prefix
			k := fmt.Sprint(prefix)
			if a, ok := memo[k]; ok {
				return a
			}
			a := int32(rng.IntN(v))
			if rng.IntN(3) > 0 { // follow some beam through this prefix
				for _, b := range beams {
					if len(b) > len(prefix) && slices.Equal(b[:len(prefix)], prefix) {
						a = b[len(prefix)]
						break
					}
				}
			}
			memo[k] = a
			return a
		}
		// The chains layout and the LLM's argmax after each of its tokens.
		n := 1 + w*(l-1)
		tokens, argmax := make([]int32, n), make([]int32, n)
		tokens[0], argmax[0] = beams[0][0], llm(beams[0][:1])
		byLLM := make([][]int32, w)
		for i, b := range beams {
			byLLM[i] = make([]int32, l)
			for d := range l {
				byLLM[i][d] = llm(b[:d+1])
			}
			for d := 1; d < l; d++ {
				tokens[1+i*(l-1)+d-1], argmax[1+i*(l-1)+d-1] = b[d], byLLM[i][d]
			}
		}
		got := make([]int32, 3*l)
		g := graph.New()
		ta, aa := g.Input("tokens", graph.I32, n), g.Input("argmax", graph.I32, n)
		out := graph.AcceptChains(ta, aa, w)
		if err := graph.Eval(be, map[*graph.Array]any{ta: tokens, aa: argmax}, func(p *graph.Plan) error { return p.Read(out, got) }, out); err != nil {
			t.Fatal(err)
		}
		nRef, best := refGreedy(beams, byLLM)
		k := nRef[best]
		wantPath := []int32{0}
		wantEmit := slices.Clone(beams[best][1 : k+1])
		for d := 1; d < l; d++ {
			wantPath = append(wantPath, int32(1+best*(l-1)+d-1))
		}
		wantEmit = append(wantEmit, byLLM[best][k])
		for len(wantEmit) < l {
			wantEmit = append(wantEmit, -1)
		}
		last := wantPath[k]
		if !slices.Equal(got[:l], wantPath) || !slices.Equal(got[l:2*l], wantEmit) || got[2*l] != last || int(got[2*l+1]) != k {
			t.Fatalf("trial %d: beams %v, argmax %v: AcceptChains = %v; want path %v, emitted %v, last %d, n %d",
				trial, beams, byLLM, got, wantPath, wantEmit, last, k)
		}
		// The merged tree's greedy acceptance emits the same tokens.
		tr, err := BuildTree(beams)
		if err != nil {
			t.Fatal(err)
		}
		am := make([]int32, tr.N())
		for u := range am {
			am[u] = llm(tokensTo(tr, u))
		}
		tb, tn := AcceptGreedy(tr, am)
		path := tr.Path(tb, tn)
		treeEmit := append(slices.Clone(tr.Beams[tb][1:tn+1]), am[path[len(path)-1]])
		if !slices.Equal(treeEmit, wantEmit[:k+1]) {
			t.Fatalf("trial %d: beams %v: AcceptChains emits %v, AcceptGreedy over the tree %v", trial, beams, wantEmit[:k+1], treeEmit)
		}
		accepted += k
	}
	if accepted < 100 {
		t.Errorf("only %d drafts accepted in all trials: the cases barely exercise acceptance", accepted)
	}
}

// tokensTo spells the prefix that ends at packed node u.
func tokensTo(tr *Tree, u int) []int32 {
	var toks []int32
	for _, k := range tr.PathTo(u) {
		toks = append(toks, tr.Tokens[k])
	}
	return toks
}

// A DeviceStep, on the CPU reference backend, runs the steps the host loop
// runs (BeamSearch, TreeBuilder, Forward, AcceptGreedy, Keep) in lockstep:
// the same tokens emitted, the same hidden state for the next draft, the
// same cache length, for the bundled head (which gets drafts accepted, so
// the beams laid out by BeamChains must be the searched ones) and a random
// one (mostly rejected), at W ∈ {1, 2, 4} and L ∈ {3, 5} (the random head
// at two of them in make test). Both end equal to greedy decoding, since
// the host loop is.
func TestDeviceStepEqualsHostStep(t *testing.T) {
	ck, err := llama.Open("../../../models/stories260K/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	be := cpu.NewReference()
	runner, err := llama.Bind(ck.Model, be)
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	bundled, err := Load("../../../models/stories260K/drafter")
	if err != nil {
		t.Fatal(err)
	}
	defer bundled.Close()
	random := NewRandom(Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 7)
	c := ck.Model.Config
	prompt := []int32{1, 403, 407, 261, 378, 97, 297} // BOS and a few tokens of the 512
	for hi, head := range []*Head{bundled, random} {
		d, err := NewDrafter(head, runner)
		if err != nil {
			t.Fatal(err)
		}
		shapes := [][2]int{{1, 3}, {1, 5}, {2, 3}, {2, 5}, {4, 3}, {4, 5}}
		if hi == 1 {
			// The random head's drafts are mostly rejected, so it takes
			// a step per token, on the reference backend: make test runs
			// two of its shapes (each width once is the bundled head's
			// job), make test-all all six (45 of the test's 73 s).
			shapes = testenv.Subset(shapes, 0, 3)
		}
		for _, shape := range shapes {
			w, l := shape[0], shape[1]
			t.Run(fmt.Sprintf("head%d/W%dL%d", hi, w, l), func(t *testing.T) {
				var states [2]*llama.State
				var hs [2][]float32
				var inits [2]int32
				for k := range states {
					st, err := runner.NewState(128)
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					logits, hidden := make([]float32, c.Vocab), make([]float32, c.Dim)
					if err := st.Forward(llama.Chain(prompt, false), logits, hidden); err != nil {
						t.Fatal(err)
					}
					st.Advance(len(prompt))
					states[k], hs[k], inits[k] = st, hidden, sample.Argmax(logits)
				}
				ds, err := d.NewDeviceStep(states[0], w, l)
				if err != nil {
					t.Fatal(err)
				}
				defer ds.Close()
				var tb TreeBuilder
				drafts := 0
				for step := 0; states[1].Len()+ds.N <= states[1].Cap(); step++ {
					got, err := ds.Run(hs[0], inits[0])
					if err != nil {
						t.Fatal(err)
					}
					want := hostStep(t, d, &tb, states[1], hs[1], inits[1], w, l)
					if !slices.Equal(got, want) || !slices.Equal(hs[0], hs[1]) || states[0].Len() != states[1].Len() {
						t.Fatalf("step %d: device emitted %v (len %d), host %v (len %d); hidden states equal: %v",
							step, got, states[0].Len(), want, states[1].Len(), slices.Equal(hs[0], hs[1]))
					}
					drafts += len(got) - 1
					inits[0], inits[1] = got[len(got)-1], want[len(want)-1]
				}
				if hi == 0 && drafts == 0 {
					t.Errorf("the bundled head got no draft accepted: the test checks little")
				}
			})
		}
		d.Close()
	}
}

// hostStep is one step of the host loop (redrafter.go's speculative,
// greedy): it returns the accepted drafts and the next token, and leaves
// the last accepted token's hidden state in h.
func hostStep(t *testing.T, d *Drafter, tb *TreeBuilder, st *llama.State, h []float32, init int32, w, l int) []int32 {
	t.Helper()
	c := d.llm.Model.Config
	beams, err := d.BeamSearch(h, init, w, l, false)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tb.Build(beams.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	n := tr.N()
	rows := make([]int32, n)
	for i := range rows {
		rows[i] = int32(i)
	}
	logits, hidden := make([]float32, n*c.Vocab), make([]float32, n*c.Dim)
	if err := st.Forward(llama.Batch{Tokens: tr.Tokens, Depth: tr.Depth, End: tr.End, Rows: rows}, logits, hidden); err != nil {
		t.Fatal(err)
	}
	am := make([]int32, n)
	for u := range am {
		am[u] = sample.Argmax(logits[u*c.Vocab : (u+1)*c.Vocab])
	}
	beam, k := AcceptGreedy(tr, am)
	path := slices.Clone(tr.Path(beam, k))
	if err := st.Keep(path); err != nil {
		t.Fatal(err)
	}
	last := int(path[len(path)-1])
	copy(h, hidden[last*c.Dim:(last+1)*c.Dim])
	return append(slices.Clone(tr.Beams[beam][1:k+1]), am[last])
}
