package llama

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// passesOf runs a prefill, two decode steps and a ReDrafter-shaped tree
// (with Keep of one branch, then a decode step reading what it kept)
// through the checkpoint at path on be, fused or not, and returns every
// pass's logits and hidden states, in order, and the number of steps the
// decode plan has.
func passesOf(t *testing.T, path string, be graph.Backend, fused bool) (outs [][]float32, decodeSteps int) {
	t.Helper()
	r, c := bindFusedForTest(t, path, be, fused)
	s, err := r.NewState(48)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tree := Batch{Tokens: []int32{5, 43, 47, 26, 30}, Depth: []int32{0, 1, 2, 3, 2}, End: []int32{4, 4, 3, 3, 4},
		Rows: []int32{0, 1, 2, 3, 4}}
	run := func(b Batch) {
		l, h := make([]float32, len(b.Rows)*c.Vocab), make([]float32, len(b.Rows)*c.Dim)
		if err := s.Forward(b, l, h); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, l, h)
	}
	run(Chain([]int32{1, 9, 33, 7, 2, 11}, true))
	s.Advance(6)
	for _, tok := range []int32{17, 3} {
		run(Chain([]int32{tok}, false))
		s.Advance(1)
	}
	run(tree)
	if err := s.Keep([]int32{0, 1, 4}); err != nil {
		t.Fatal(err)
	}
	run(Chain([]int32{8}, false))
	return outs, len(s.plans[[2]int{1, 1}].plan.Steps)
}

// bindFusedForTest opens the checkpoint at path and binds it to be, fused
// or not (failing t if the binding is not what was asked for); both are
// closed when t ends.
func bindFusedForTest(t *testing.T, path string, be graph.Backend, fused bool) (*Runner, Config) {
	t.Helper()
	ck, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	r, err := BindFused(ck.Model, be, fused)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if r.Fused() != fused {
		t.Fatalf("BindFused(%v) built fused=%v", fused, r.Fused())
	}
	return r, ck.Model.Config
}

// Fused layers (LinearOp, RoPEKVWriteOp), which the CPU composes from the
// unfused ops' code, give the unfused graph's bits on both CPU backends, in
// f32, 4-bit and 8-bit, over prefill, decode, a tree and a kept branch; and
// a fused decode step is six steps a layer.
func TestFusedLayersEqualUnfused(t *testing.T) {
	q4, _ := mlxCheckpoint(t, 32)
	for _, tc := range []struct {
		path    string
		unfused int // steps of parts left unfused
	}{
		{storiesGGUF, 0},
		// layer 0's gate is 8-bit and its up 4-bit: they cannot be one
		// matrix, so that FFN keeps norm, gate, up, SwiGLU, down and add.
		{q4, 4},
	} {
		path := tc.path
		for _, be := range []graph.Backend{cpu.NewReference(), cpu.New(2)} {
			want, unfusedSteps := passesOf(t, path, be, false)
			got, fusedSteps := passesOf(t, path, be, true)
			for i := range want {
				if !bitsEqual(got[i], want[i]) {
					t.Errorf("%s on %s: pass %d's %s differ fused", path, be.Name(), i/2, [2]string{"logits", "hidden states"}[i%2])
				}
			}
			ck, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			layers := ck.Model.Config.Layers
			ck.Close()
			// embed, the layers, then gather, norm and the logits' product
			if want := 1 + 6*layers + 3 + tc.unfused; fusedSteps != want {
				t.Errorf("%s on %s: a fused decode step has %d steps, want %d (unfused %d)", path, be.Name(), fusedSteps, want, unfusedSteps)
			}
			t.Logf("%s on %s: decode step of %d steps fused, %d unfused", path, be.Name(), fusedSteps, unfusedSteps)
		}
	}
}
