package llama

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudatest"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/metaltest"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

func TestMain(m *testing.M) {
	code := metaltest.Main(m)
	cudatest.Cleanup()
	os.Exit(code)
}

// jointCase is one sequence of TestJointForwardEqualsAlone: a prefix run
// on its own, then a batch for the joint pass.
type jointCase struct {
	prefix []int32
	batch  Batch
}

// chainOf is n token ids derived from first.
func chainOf(first, n int32) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = (first + int32(i)*37) % 500
	}
	return ids
}

// jointCases mix what a group's pass holds: decode tokens, prefill
// chains (last row or every row), a ReDrafter tree, a fresh sequence, and
// a chain longer than Metal's matvec rows (which must run alone there).
func jointCases() []jointCase {
	tree := Batch{Tokens: []int32{1, 403, 407, 261, 300}, Depth: []int32{0, 1, 2, 3, 2}, End: []int32{4, 4, 3, 3, 4},
		Rows: []int32{0, 1, 2, 3, 4}}
	return []jointCase{
		{prefix: chainOf(5, 7), batch: Chain([]int32{42}, false)},
		{prefix: chainOf(9, 3), batch: Chain(chainOf(11, 8), true)},
		{prefix: chainOf(13, 12), batch: tree},
		{batch: Chain([]int32{1}, false)},
		{prefix: chainOf(17, 2), batch: Chain(chainOf(19, 20), false)},
		{prefix: chainOf(23, 30), batch: Chain([]int32{99}, false)},
	}
}

// bitsEqual reports whether a and b hold the same bits.
func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// checkJoint runs the cases alone and jointly on be, twice (after the
// first pass each sequence keeps part of its batch and decodes one more
// token, so the second pass reads what the first wrote into the caches),
// and requires the same bits for every logit and hidden state.
func checkJoint(t *testing.T, be graph.Backend, kv graph.DType) BatcherStats {
	t.Helper()
	return checkJointOf(t, storiesGGUF, be, kv)
}

// checkJointOf is checkJoint on the model at path (a vocabulary of at
// least 500 tokens).
func checkJointOf(t *testing.T, path string, be graph.Backend, kv graph.DType) BatcherStats {
	t.Helper()
	ck, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := Bind(ck.Model, be)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.KVCache = kv
	c := ck.Model.Config
	cases := jointCases()
	newStates := func() []*State {
		var ss []*State
		for _, jc := range cases {
			s, err := r.NewState(64)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			if len(jc.prefix) > 0 {
				if err := s.Forward(Chain(jc.prefix, false), nil, make([]float32, c.Dim)); err != nil {
					t.Fatal(err)
				}
				s.Advance(len(jc.prefix))
			}
			ss = append(ss, s)
		}
		return ss
	}
	alone, joint := newStates(), newStates()
	bt := r.NewBatcher()
	defer bt.Close()
	outs := func(b Batch) ([]float32, []float32) {
		return make([]float32, len(b.Rows)*c.Vocab), make([]float32, len(b.Rows)*c.Dim)
	}
	for round := range 2 {
		var reqs []*Request
		var want [][2][]float32
		for i, jc := range cases {
			b := jc.batch
			if round == 1 {
				b = Chain([]int32{int32(7 + i)}, false)
			}
			l, h := outs(b)
			if err := alone[i].Forward(b, l, h); err != nil {
				t.Fatal(err)
			}
			want = append(want, [2][]float32{l, h})
			l, h = outs(b)
			reqs = append(reqs, &Request{State: joint[i], Batch: b, Logits: l, Hidden: h})
		}
		bt.Forward(reqs)
		for i, q := range reqs {
			if q.Err != nil {
				t.Fatalf("round %d, sequence %d: %v", round, i, q.Err)
			}
			if !bitsEqual(q.Logits, want[i][0]) || !bitsEqual(q.Hidden, want[i][1]) {
				t.Errorf("round %d, sequence %d (%d tokens): joint outputs differ from its own forward", round, i, len(q.Batch.Tokens))
			}
		}
		for i, jc := range cases {
			for _, s := range []*State{alone[i], joint[i]} {
				var err error
				switch {
				case round == 1:
					s.Advance(1)
				case len(jc.batch.Rows) == 5: // the tree: keep the branch 1, 403, 300
					err = s.Keep([]int32{0, 1, 4})
				default:
					s.Advance(len(jc.batch.Tokens))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return bt.Stats()
}

// A joint pass over sequences of every shape gives each the bits of its own
// forward pass, on the CPU (one pass for all), on Metal's fake device and
// with Metal's kernels emulated (passes cut at the matvec rows), with an
// f32 and an f16 cache.
func TestJointForwardEqualsAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		be   func(t *testing.T) graph.Backend
		kv   graph.DType
	}{
		{"cpu", func(*testing.T) graph.Backend { return cpu.New(2) }, graph.F32},
		{"cpu-f16", func(*testing.T) graph.Backend { return cpu.New(2) }, graph.F16},
		{"reference", func(*testing.T) graph.Backend { return cpu.NewReference() }, graph.F32},
		{"metal-fake", func(*testing.T) graph.Backend {
			return metal.NewFake(metal.Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 16}, metal.Fake{Reference: cpu.NewReference()})
		}, graph.F16},
		{"metal-emulated", func(t *testing.T) graph.Backend { return metaltest.NewEmulated(t) }, graph.F16},
		{"cuda-emulated", func(t *testing.T) graph.Backend { return cudatest.NewEmulated(t) }, graph.F16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasSuffix(tc.name, "-emulated") && testing.Short() {
				t.Skip("emulated kernels are slow")
			}
			st := checkJoint(t, tc.be(t), tc.kv)
			n := len(jointCases())
			if st.Requests != 2*n || st.Compiles != st.Passes {
				t.Errorf("stats %+v: want %d requests and one compile per distinct pass", st, 2*n)
			}
			if strings.HasPrefix(tc.name, "metal") {
				// Round 0: 15 rows, 20 alone, 1; round 1: 6 rows.
				if st.Passes != 4 {
					t.Errorf("%d passes on Metal, want 4 (rows cut at 16)", st.Passes)
				}
			} else if st.Passes != 2 {
				t.Errorf("%d passes on the CPU, want 2", st.Passes)
			}
		})
	}
}

// A request that cannot run fails alone: the others of its pass still get
// their outputs.
func TestJointForwardErrorsStayWithTheirRequest(t *testing.T) {
	ck, err := Open(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := Bind(ck.Model, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	v := ck.Model.Config.Vocab
	a, _ := r.NewState(4)
	defer a.Close()
	b, _ := r.NewState(4)
	defer b.Close()
	bt := r.NewBatcher()
	defer bt.Close()
	reqs := []*Request{
		{State: a, Batch: Chain([]int32{1, 2, 3, 4, 5}, false), Logits: make([]float32, v)}, // past its cache
		{State: b, Batch: Chain([]int32{1, 2}, false), Logits: make([]float32, v)},
		{State: b, Batch: Chain([]int32{1}, false), Logits: make([]float32, v)}, // b twice
	}
	bt.Forward(reqs)
	if reqs[0].Err == nil || !strings.Contains(reqs[0].Err.Error(), "exceed the context") {
		t.Errorf("overflowing request: err %v", reqs[0].Err)
	}
	if reqs[2].Err == nil || !strings.Contains(reqs[2].Err.Error(), "twice") {
		t.Errorf("repeated State: err %v", reqs[2].Err)
	}
	want := make([]float32, v)
	c, _ := r.NewState(4)
	defer c.Close()
	if err := c.Forward(Chain([]int32{1, 2}, false), want, nil); err != nil {
		t.Fatal(err)
	}
	if reqs[1].Err != nil || !bitsEqual(reqs[1].Logits, want) {
		t.Errorf("the valid request: err %v, logits equal %v", reqs[1].Err, bitsEqual(reqs[1].Logits, want))
	}
}
