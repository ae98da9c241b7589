package metal

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// chain builds x → SiLU → Add(·, x) → SiLU ... n times: every op reads the
// previous result, so every dispatch after the first needs a barrier.
func chain(g *graph.Graph, x *graph.Array, n int) *graph.Array {
	y := x
	for range n {
		y = graph.Add(graph.SiLU(y), x)
	}
	return y
}

func TestBarriersOnlyWhereBuffersConflict(t *testing.T) {
	be := newReferenceFake(Policy{FirstCommit: 100, OpsPerBuffer: 100, MatvecMaxRows: 4})
	g := graph.New()
	x := g.Input("x", graph.F32, 4, 8)
	// Four independent SiLUs of x, then a chain that joins them.
	var outs []*graph.Array
	for range 4 {
		outs = append(outs, graph.SiLU(x))
	}
	a1, a2 := graph.Add(outs[0], outs[1]), graph.Add(outs[2], outs[3])
	sum := graph.Add(a1, a2)
	// Every array is an output, so the planner reuses no buffer (reuse would
	// add write-after-read barriers of its own).
	p, err := graph.Compile(be, append(outs, a1, a2, sum)...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if err := p.Write(x, make([]float32, 32)); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	ev := strings.Join(FakeEvents(be), "; ")
	// The SiLUs run together; the two first Adds read them (barrier) and
	// may run together; the last Add reads theirs (barrier).
	want := "dispatch elementwise_silu_f32; dispatch elementwise_silu_f32; dispatch elementwise_silu_f32; dispatch elementwise_silu_f32; " +
		"barrier; dispatch elementwise_add_f32; dispatch elementwise_add_f32; barrier; dispatch elementwise_add_f32; commit; wait"
	if ev != want {
		t.Errorf("events:\n got %s\nwant %s", ev, want)
	}
}

func TestWriteAfterReadGetsABarrier(t *testing.T) {
	// The planner reuses a dead buffer: b = SiLU(a) then c = SiLU(b) may put
	// c where a was, which a dispatch still reading a must not overlap.
	a := []span{{buf: &Buffer{dev: &fakeBuffer{}, size: 64}, lo: 0, hi: 64}}
	other := []span{{buf: &Buffer{dev: &fakeBuffer{}, size: 64}, lo: 0, hi: 64}}
	ds := []*dispatch{
		{reads: a, writes: other},
		{reads: nil, writes: a}, // WAR on a
		{reads: nil, writes: []span{{buf: other[0].buf, lo: 0, hi: 32}}}, // WAW on other (since the barrier? no: other was written before it)
	}
	s := planSchedule(ds, Policy{FirstCommit: 10, OpsPerBuffer: 10})
	if want := []bool{false, true, false}; !slices.Equal(s.barrier, want) {
		t.Errorf("barriers %v, want %v", s.barrier, want)
	}
	// Disjoint ranges of one buffer do not conflict.
	buf := &Buffer{dev: &fakeBuffer{}, size: 64}
	ds = []*dispatch{{writes: []span{{buf, 0, 32}}}, {writes: []span{{buf, 32, 64}}}, {reads: []span{{buf, 16, 40}}}}
	s = planSchedule(ds, Policy{FirstCommit: 10, OpsPerBuffer: 10})
	if want := []bool{false, false, true}; !slices.Equal(s.barrier, want) {
		t.Errorf("ranges: barriers %v, want %v", s.barrier, want)
	}
}

func TestCommitPolicy(t *testing.T) {
	ds := make([]*dispatch, 100)
	for i := range ds {
		ds[i] = &dispatch{}
	}
	s := planSchedule(ds, Policy{FirstCommit: 8, OpsPerBuffer: 40})
	var at []int
	for i, c := range s.commit {
		if c {
			at = append(at, i+1)
		}
	}
	if want := []int{8, 48, 88, 100}; !slices.Equal(at, want) {
		t.Errorf("commits after dispatches %v, want %v", at, want)
	}
}

// TestPlanCache runs a plan several times: it is encoded once, every run
// commits the same command buffers, each run waits, and the results match
// the CPU reference. Freed buffers go back to the pool and are reused.
func TestPlanCache(t *testing.T) {
	be := newReferenceFake(Policy{FirstCommit: 3, OpsPerBuffer: 5, MatvecMaxRows: 4})
	ref := cpu.NewReference()
	run := func(be graph.Backend, in []float32) []float32 {
		g := graph.New()
		x := g.Input("x", graph.F32, 3, 5)
		y := chain(g, x, 6)
		p, err := graph.Compile(be, y)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Free()
		out := make([]float32, 15)
		for range 3 {
			if err := p.Write(x, in); err != nil {
				t.Fatal(err)
			}
			if err := p.Run(); err != nil {
				t.Fatal(err)
			}
			if err := p.Read(y, out); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	in := make([]float32, 15)
	for i := range in {
		in[i] = float32(i)/7 - 1
	}
	want := run(ref, in)
	got := run(be, in)
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	st := be.Stats()
	if st.Encodes != 1 || st.Runs != 3 || st.Dispatches != 3*12 {
		t.Errorf("stats %+v: want 1 encode, 3 runs, 36 dispatches", st)
	}
	// 12 dispatches: commits after 3, 8, 12 → 3 command buffers per run.
	if st.CommandBuffers != 9 {
		t.Errorf("%d command buffers, want 9", st.CommandBuffers)
	}
	ev := FakeEvents(be)
	if n := strings.Count(strings.Join(ev, ";"), "wait"); n != 9 {
		t.Errorf("%d waits", n)
	}
	// The second compile reuses pooled memory.
	f := be.dev.(*fakeDevice)
	live := f.live
	run(be, in)
	if f.live != live {
		t.Errorf("device buffers went from %d to %d for the same plan shape", live, f.live)
	}
}

func TestUseAfterFree(t *testing.T) {
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	g := graph.New()
	x := g.Input("x", graph.F32, 8)
	y := graph.SiLU(x)
	p, err := graph.Compile(be, y)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	p.Free()
	if err := p.Run(); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Errorf("run after Free: %v, want an error about a freed buffer", err)
	}
}

func TestUnsupportedShapesAreErrors(t *testing.T) {
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	g := graph.New()
	q := g.Input("q", graph.F32, 1, 1, 300)
	k := g.Input("k", graph.F32, 1, 4, 300)
	kl := g.Input("kvLen", graph.I32, 1)
	end := g.Input("end", graph.I32, 1)
	err := graph.Eval(be, nil, func(*graph.Plan) error { return nil }, graph.Attention(q, k, k, kl, end, 1))
	if err == nil || !strings.Contains(err.Error(), "head dim 300") {
		t.Errorf("head dim 300: %v", err)
	}
}

func TestDefaultPolicyAndBeam(t *testing.T) {
	for _, c := range []struct {
		info DeviceInfo
		ops  int
		beam BeamShape
	}{
		{DeviceInfo{Name: "Apple M1", Architecture: "applegpu_g13g"}, 40, BeamShape{1, 4}},
		// "s" is Pro (the M2 Pro reports applegpu_g14s), "c" is Max.
		{DeviceInfo{Name: "Apple M2 Pro", Architecture: "applegpu_g14s"}, 50, BeamShape{2, 4}},
		{DeviceInfo{Name: "Apple M2 Max", Architecture: "applegpu_g14c"}, 50, BeamShape{2, 4}},
		{DeviceInfo{Name: "Apple M1 Pro"}, 50, BeamShape{2, 4}},
		{DeviceInfo{Name: "Apple M3 Max", Architecture: "applegpu_g15c"}, 50, BeamShape{2, 4}},
		{DeviceInfo{Name: "Apple M2 Ultra", Architecture: "applegpu_g14d"}, 50, BeamShape{3, 5}},
		{DeviceInfo{Name: "Apple A17 Pro", Architecture: "applegpu_g16p"}, 20, BeamShape{1, 4}},
		// The core count, when known, decides the beam.
		{DeviceInfo{Name: "Apple M4", Architecture: "applegpu_g16g", Cores: 10}, 40, BeamShape{1, 4}},
		{DeviceInfo{Name: "Apple M3 Pro", Architecture: "applegpu_g15s", Cores: 14}, 50, BeamShape{2, 4}},
		{DeviceInfo{Name: "Apple M4 Max", Cores: 40}, 50, BeamShape{2, 4}},
		{DeviceInfo{Name: "Apple GPU", Cores: 64}, 40, BeamShape{3, 5}},
		{DeviceInfo{Name: "Apple M9 Pro", Cores: 8}, 50, BeamShape{1, 4}},
	} {
		if p := DefaultPolicy(c.info); p.OpsPerBuffer != c.ops {
			t.Errorf("DefaultPolicy(%s).OpsPerBuffer = %d, want %d", c.info.Name, p.OpsPerBuffer, c.ops)
		}
		if b := RecommendedBeam(c.info); b != c.beam {
			t.Errorf("RecommendedBeam(%s) = %v, want %v", c.info.Name, b, c.beam)
		}
		// The biggest tree of the recommended beam verifies through matvec,
		// as decode steps do, so greedy ReDrafter stays exact.
		if b, p := RecommendedBeam(c.info), DefaultPolicy(c.info); 1+b.Width*(b.Length-1) > p.MatvecMaxRows {
			t.Errorf("%s: a %v tree has %d tokens, more than MatvecMaxRows %d", c.info.Name, b, 1+b.Width*(b.Length-1), p.MatvecMaxRows)
		}
	}
	t.Setenv("REDRAFTER_METAL_OPS_PER_BUFFER", "7")
	if p, err := DefaultPolicy(DeviceInfo{}).WithEnv(); err != nil || p.OpsPerBuffer != 7 {
		t.Errorf("env override: %+v %v", p, err)
	}
	t.Setenv("REDRAFTER_METAL_OPS_PER_BUFFER", "x")
	if _, err := DefaultPolicy(DeviceInfo{}).WithEnv(); err == nil {
		t.Error("bad env value accepted")
	}
}

// TestSupportsEveryOp checks that the backend claims every graph op for the
// dtypes the graph builders produce, and refuses dtypes it has no kernel for.
func TestSupportsEveryOp(t *testing.T) {
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	f32 := []graph.DType{graph.F32, graph.F32, graph.F32, graph.I32, graph.I32}
	for _, op := range graph.AllOps() {
		in := f32
		switch op.(type) { // quantized weights: u32 codes, f16 scales and biases
		case graph.QMatMulOp:
			in = []graph.DType{graph.F32, graph.U32, graph.F16, graph.F16}
		case graph.QEmbedOp:
			in = []graph.DType{graph.U32, graph.F16, graph.F16, graph.I32}
		case graph.DequantizeOp:
			in = []graph.DType{graph.U32, graph.F16, graph.F16}
		case graph.RNNStepOp:
			in = []graph.DType{graph.F32, graph.F32, graph.F16, graph.F16, graph.F32}
		case graph.BeamTopOp:
			in = []graph.DType{graph.I32, graph.F32}
		case graph.BeamChainsOp, graph.AcceptChainsOp:
			in = []graph.DType{graph.I32, graph.I32}
		case graph.LinearOp: // x, the norm's gain, an f16 weight
			in = []graph.DType{graph.F32, graph.F32, graph.F16}
		case graph.RoPEKVWriteOp: // qkv, pos, f16 caches, kvLen
			in = []graph.DType{graph.F32, graph.I32, graph.F16, graph.F16, graph.I32}
		}
		if !be.Supports(op, in) {
			t.Errorf("Supports(%v, %v) = false", op, in)
		}
	}
	for _, dt := range []graph.DType{graph.F16, graph.BF16} {
		if !be.Supports(graph.MatMulOp{}, []graph.DType{graph.F32, dt}) || !be.Supports(graph.EmbedOp{}, []graph.DType{dt, graph.I32}) {
			t.Errorf("MatMul/Embed with %v weights not supported", dt)
		}
	}
	if !be.Supports(graph.KVWriteOp{}, []graph.DType{graph.F16, graph.F32, graph.I32}) ||
		!be.Supports(graph.AttentionOp{}, []graph.DType{graph.F32, graph.F16, graph.F16, graph.I32, graph.I32}) {
		t.Error("an f16 KV cache is not supported")
	}
	// The fused layer ops: every weight type, f32 and f16 caches; no bf16
	// cache, no caches of two types, no f16 activations.
	q := graph.LinearOp{Norm: true, Bias: true, GLU: graph.GLUSiLU, Residual: true, Bits: 4, GroupSize: 64}
	for _, c := range []struct {
		op   graph.Op
		in   []graph.DType
		want bool
	}{
		{graph.LinearOp{Residual: true}, []graph.DType{graph.F32, graph.BF16, graph.F32}, true},
		{q, []graph.DType{graph.F32, graph.F32, graph.U32, graph.BF16, graph.BF16, graph.F32, graph.F32}, true},
		{q, []graph.DType{graph.F32, graph.F32, graph.U32, graph.BF16, graph.F16, graph.F32, graph.F32}, false},
		{graph.LinearOp{Norm: true}, []graph.DType{graph.F32, graph.F16, graph.F16}, false},
		{graph.LinearOp{}, []graph.DType{graph.F16, graph.F16}, false},
		{graph.RoPEKVWriteOp{}, []graph.DType{graph.F32, graph.I32, graph.F32, graph.F32, graph.I32}, true},
		{graph.RoPEKVWriteOp{}, []graph.DType{graph.F32, graph.I32, graph.BF16, graph.BF16, graph.I32}, false},
		{graph.RoPEKVWriteOp{}, []graph.DType{graph.F32, graph.I32, graph.F16, graph.F32, graph.I32}, false},
	} {
		if got := be.Supports(c.op, c.in); got != c.want {
			t.Errorf("Supports(%v, %v) = %v, want %v", c.op, c.in, got, c.want)
		}
	}
	if be.Supports(graph.KVWriteOp{}, []graph.DType{graph.BF16, graph.F32, graph.I32}) ||
		be.Supports(graph.AttentionOp{}, []graph.DType{graph.F32, graph.F16, graph.F32, graph.I32, graph.I32}) {
		t.Error("a bf16 cache, or K and V of different types, claimed without a kernel")
	}
}

// TestBuildKernels: the "metal" backend builds every kernel when it opens,
// so a file the compiler refuses is an error at open (naming the file,
// with the log) and "auto" can fall back to the CPU.
func TestBuildKernels(t *testing.T) {
	if err := newReferenceFake(DefaultPolicy(DeviceInfo{})).BuildKernels(); err != nil {
		t.Fatalf("fake device: %v", err)
	}
	dev := newFakeDevice(Fake{Refuse: map[string]error{
		"rope.metal":  errors.New("compiling internal/backend/metal/shaders/rope.metal: error: bad rope"),
		"quant.metal": errors.New("compiling internal/backend/metal/shaders/quant.metal: error: bad quant"),
	}})
	be := newBackend(dev, DefaultPolicy(DeviceInfo{}))
	err := be.BuildKernels()
	if err == nil || !strings.Contains(err.Error(), "bad rope") || !strings.Contains(err.Error(), "bad quant") {
		t.Fatalf("err = %v, want both refused files", err)
	}
	if _, err := be.pipeline("norm_rms_f32"); err != nil {
		t.Errorf("a file that compiled: %v", err)
	}
}

func TestAppleFamily(t *testing.T) {
	for f, want := range map[string]int{"Apple7": 7, "Apple10": 10, "Mac2": -1, "": -1, "Applex": -1} {
		n, ok := appleFamily(f)
		if (want < 0) == ok || (ok && n != want) {
			t.Errorf("appleFamily(%q) = %d, %v", f, n, ok)
		}
	}
}

// Close releases every pipeline the backend built, as it does the pooled
// buffers.
func TestCloseReleasesPipelines(t *testing.T) {
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	g := graph.New()
	x := g.Input("x", graph.F32, 8)
	p, err := graph.Compile(be, graph.Add(graph.SiLU(x), x))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	f := be.dev.(*fakeDevice)
	if f.livePipes < 2 {
		t.Fatalf("%d pipelines built for SiLU and Add", f.livePipes)
	}
	p.Free()
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if f.livePipes != 0 || f.live != 0 {
		t.Errorf("after Close: %d pipelines and %d buffers not released", f.livePipes, f.live)
	}
}
