package cudatest

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// decodeShape is the shape of a Llama-style decode pass built by
// buildDecode: one token through layers of RMSNorm, Q/K/V products, RoPE,
// KV writes, attention, the O product and residual, RMSNorm, gate/up,
// SwiGLU, down and residual, then the norm, the head and argmax. The
// TinyLlama-shaped model has 22 layers; the dimensions here are small, as
// only the launches and their order matter to the host path.
type decodeShape struct {
	layers, dim, heads, kvHeads, headDim, ffn, vocab, ctx int
}

var (
	tinyDecode  = decodeShape{layers: 2, dim: 64, heads: 4, kvHeads: 2, headDim: 16, ffn: 96, vocab: 50, ctx: 16}
	llamaLaunch = decodeShape{layers: 22, dim: 64, heads: 4, kvHeads: 2, headDim: 16, ffn: 96, vocab: 50, ctx: 16}
)

// decodePlan is a compiled decode pass with its inputs and result.
type decodePlan struct {
	plan                    *graph.Plan
	tokens, pos, kvLen, end *graph.Array
	next, logits            *graph.Array
	bufs                    []graph.Buffer // weights and caches, freed by free
	be                      graph.Backend
}

func (d *decodePlan) free() {
	d.plan.Free()
	for _, b := range d.bufs {
		d.be.Free(b)
	}
}

// buildDecode compiles a decode pass of shape s on be, with weights drawn
// from seed (the same on every backend given the same seed).
func buildDecode(tb testing.TB, be graph.Backend, s decodeShape, seed uint64) *decodePlan {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	d := &decodePlan{be: be}
	g := graph.New()
	weight := func(shape ...int) *graph.Array {
		n := graph.Shape(shape).Numel()
		w := make([]float32, n)
		scale := float32(1 / math.Sqrt(float64(shape[len(shape)-1])))
		for i := range w {
			w[i] = (2*r.Float32() - 1) * scale
		}
		buf, err := be.WrapHost(slices.Clone(graph.AsBytes(w)))
		if err != nil {
			tb.Fatal(err)
		}
		d.bufs = append(d.bufs, buf)
		return g.Const("w", buf, 0, graph.F32, shape...)
	}
	norm := func() *graph.Array {
		w := make([]float32, s.dim)
		for i := range w {
			w[i] = 0.5 + r.Float32()
		}
		buf, err := be.WrapHost(graph.AsBytes(w))
		if err != nil {
			tb.Fatal(err)
		}
		d.bufs = append(d.bufs, buf)
		return g.Const("norm", buf, 0, graph.F32, s.dim)
	}
	cache := func() *graph.Array {
		buf, err := be.Alloc(s.kvHeads * s.ctx * s.headDim * 4)
		if err != nil {
			tb.Fatal(err)
		}
		d.bufs = append(d.bufs, buf)
		return g.Var("cache", buf, 0, graph.F32, s.kvHeads, s.ctx, s.headDim)
	}
	invFreq := make([]float32, s.headDim/2)
	for i := range invFreq {
		invFreq[i] = float32(math.Pow(10000, -2*float64(i)/float64(s.headDim)))
	}
	d.tokens = g.Input("tokens", graph.I32, 1)
	d.pos = g.Input("pos", graph.I32, 1)
	d.kvLen = g.Input("kvLen", graph.I32, 1)
	d.end = g.Input("end", graph.I32, 1)
	x := graph.Embed(weight(s.vocab, s.dim), d.tokens)
	for range s.layers {
		h := graph.RMSNorm(x, norm(), 1e-5)
		q := graph.RoPE(graph.Reshape(graph.MatMul(h, weight(s.heads*s.headDim, s.dim)), 1, s.heads, s.headDim), d.pos, invFreq, false)
		k := graph.RoPE(graph.Reshape(graph.MatMul(h, weight(s.kvHeads*s.headDim, s.dim)), 1, s.kvHeads, s.headDim), d.pos, invFreq, false)
		v := graph.Reshape(graph.MatMul(h, weight(s.kvHeads*s.headDim, s.dim)), 1, s.kvHeads, s.headDim)
		kc := graph.KVWrite(cache(), k, d.kvLen)
		vc := graph.KVWrite(cache(), v, d.kvLen)
		a := graph.Reshape(graph.Attention(q, kc, vc, d.kvLen, d.end, float32(1/math.Sqrt(float64(s.headDim)))), 1, s.heads*s.headDim)
		x = graph.Add(x, graph.MatMul(a, weight(s.dim, s.heads*s.headDim)))
		h = graph.RMSNorm(x, norm(), 1e-5)
		up := graph.SwiGLU(graph.MatMul(h, weight(s.ffn, s.dim)), graph.MatMul(h, weight(s.ffn, s.dim)))
		x = graph.Add(x, graph.MatMul(up, weight(s.dim, s.ffn)))
	}
	d.logits = graph.MatMul(graph.RMSNorm(x, norm(), 1e-5), weight(s.vocab, s.dim))
	d.next = graph.Argmax(d.logits)
	p, err := graph.Compile(be, d.next, d.logits)
	if err != nil {
		tb.Fatal(err)
	}
	d.plan = p
	return d
}

// write sets the inputs of decoding token at position pos.
func (d *decodePlan) write(tb testing.TB, token, pos int32) {
	tb.Helper()
	for _, in := range []struct {
		a *graph.Array
		v int32
	}{{d.tokens, token}, {d.pos, pos}, {d.kvLen, pos}, {d.end, 0}} {
		if err := d.plan.Write(in.a, []int32{in.v}); err != nil {
			tb.Fatal(err)
		}
	}
}

// fakeBackend is a CUDA backend over a fake driver, with graphs on or off.
func fakeBackend(tb testing.TB, graphs bool, exec func(*cudafake.Launch) error) (*cuda.Backend, *cudafake.Driver) {
	tb.Helper()
	if graphs {
		tb.Setenv(envvar.CUDAGraphs.Name(), "")
	} else {
		tb.Setenv(envvar.CUDAGraphs.Name(), "off")
	}
	f := cudafake.New(exec)
	return cuda.NewWithDriver(f), f
}

// TestGraphFromSecondRun: a plan's first Run queues its launches one by
// one; the second builds its graph; from then on each Run is exactly one
// graph launch, one host wait and one asynchronous copy of the four
// inputs written (they share a buffer), and no launch or synchronous copy. Freeing the plan
// destroys the graph; with REDRAFTER_CUDA_GRAPHS=off no graph is built.
func TestGraphFromSecondRun(t *testing.T) {
	be, f := fakeBackend(t, true, nil)
	defer be.Close()
	d := buildDecode(t, be, tinyDecode, 1)
	n := 0
	// The weights' uploads happen before, and the RoPE frequencies' at the
	// first Run's encoding, as the constant is made.
	prev := f.Calls()
	for run := 1; run <= 4; run++ {
		d.write(t, int32(run), int32(run-1))
		if err := d.plan.Run(); err != nil {
			t.Fatal(err)
		}
		c := f.Calls()
		got := cudafake.Calls{Launches: c.Launches - prev.Launches, GraphLaunches: c.GraphLaunches - prev.GraphLaunches,
			Syncs: c.Syncs - prev.Syncs, Uploads: c.Uploads - prev.Uploads, AsyncCopies: c.AsyncCopies - prev.AsyncCopies,
			Graphs: c.Graphs - prev.Graphs}
		want := cudafake.Calls{GraphLaunches: 1, Syncs: 1, AsyncCopies: 1}
		switch run {
		case 1:
			n = len(cuda.Launched(d.plan))
			want = cudafake.Calls{Launches: n, Syncs: 1, AsyncCopies: 1, Uploads: got.Uploads}
		case 2:
			want.Graphs = 1
		}
		if got != want {
			t.Errorf("run %d: driver calls %+v, want %+v", run, got, want)
		}
		prev = c
	}
	if s := be.Stats(); s.GraphBuilds != 1 || s.GraphLaunches != 3 || s.Waits != 4 || s.Launches != 4*n || s.Staged != 16 || s.Copies != 4 {
		t.Errorf("stats %+v, want 1 graph built, 3 launched, 4 waits, %d kernels, 16 writes staged in 4 copies", s, 4*n)
	}
	d.free()
	if c := f.Calls(); c.Destroyed != 1 {
		t.Errorf("after Free: %d graphs destroyed, want 1", c.Destroyed)
	}

	off, f := fakeBackend(t, false, nil)
	defer off.Close()
	d = buildDecode(t, off, tinyDecode, 1)
	defer d.free()
	for run := range 3 {
		d.write(t, 1, int32(run))
		if err := d.plan.Run(); err != nil {
			t.Fatal(err)
		}
	}
	if c := f.Calls(); c.Graphs != 0 || c.GraphLaunches != 0 || c.Launches != 3*n {
		t.Errorf("graphs off: %+v, want %d launches and no graph", c, 3*n)
	}
}

// TestGraphsDestroyedAtClose: a plan never freed has its graph destroyed
// when the backend closes.
func TestGraphsDestroyedAtClose(t *testing.T) {
	be, f := fakeBackend(t, true, nil)
	d := buildDecode(t, be, tinyDecode, 1)
	for range 2 {
		d.write(t, 1, 0)
		if err := d.plan.Run(); err != nil {
			t.Fatal(err)
		}
	}
	be.Close()
	if c := f.Calls(); c.Graphs != 1 || c.Destroyed != 1 {
		t.Errorf("%+v, want one graph built and destroyed", c)
	}
	d.plan.Free() // after Close: nothing more to destroy, and no crash
	if c := f.Calls(); c.Destroyed != 1 {
		t.Errorf("destroyed %d times", c.Destroyed)
	}
}

// counting is an executor that counts launches and runs nothing: the
// benchmark and the allocation test measure the host path alone.
type counting struct{ n int }

func (c *counting) exec(*cudafake.Launch) error { c.n++; return nil }

// TestGraphReplayAllocationFree: writing a decode plan's inputs and
// running it as a graph allocates nothing on the host, on the fake driver
// (whose own bookkeeping is allocation-free too).
func TestGraphReplayAllocationFree(t *testing.T) {
	var c counting
	be, _ := fakeBackend(t, true, c.exec)
	defer be.Close()
	d := buildDecode(t, be, llamaLaunch, 1)
	defer d.free()
	// Boxed once: converting a slice to the interface Write takes
	// allocates, in the caller.
	token, pos := []int32{7}, []int32{3}
	var tokenAny, posAny any = token, pos
	step := func() {
		for _, w := range []struct {
			a *graph.Array
			v any
		}{{d.tokens, tokenAny}, {d.pos, posAny}, {d.kvLen, posAny}, {d.end, tokenAny}} {
			if err := d.plan.Write(w.a, w.v); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.plan.Run(); err != nil {
			t.Fatal(err)
		}
	}
	step()
	step() // builds the graph
	token[0] = 0
	if allocs := testing.AllocsPerRun(20, step); allocs != 0 {
		t.Errorf("%v allocations per Run of a graph, want 0", allocs)
	}
	if s := be.Stats(); s.GraphLaunches != 22 {
		t.Errorf("%d graph launches, want 22 (stats %+v)", s.GraphLaunches, s)
	}
}

// BenchmarkDecodePlanRun runs a decode-shaped plan of the TinyLlama
// layer count on the fake driver with execution stubbed out (launches
// counted only): the host's cost of a decode step, its inputs' writes
// included, as a graph replay and as a launch list.
func BenchmarkDecodePlanRun(b *testing.B) {
	for _, graphs := range []bool{true, false} {
		name := "graph"
		if !graphs {
			name = "launches"
		}
		b.Run(name, func(b *testing.B) {
			var c counting
			be, f := fakeBackend(b, graphs, c.exec)
			defer be.Close()
			d := buildDecode(b, be, llamaLaunch, 1)
			defer d.free()
			ids := []int32{1}
			var idsAny any = ids
			step := func() {
				for _, a := range []*graph.Array{d.tokens, d.pos, d.kvLen, d.end} {
					if err := d.plan.Write(a, idsAny); err != nil {
						b.Fatal(err)
					}
				}
				if err := d.plan.Run(); err != nil {
					b.Fatal(err)
				}
			}
			// The first Run encodes the plan, the second builds its graph:
			// once per plan, not what a decode step costs.
			step()
			step()
			c.n = 0
			before := f.Calls()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				step()
			}
			b.StopTimer()
			calls := f.Calls()
			b.ReportMetric(float64(c.n)/float64(b.N), "kernels/op")
			b.ReportMetric(float64(calls.Launches+calls.GraphLaunches-before.Launches-before.GraphLaunches)/float64(b.N), "driver-launches/op")
		})
	}
}

// dropEdge is a fake driver with a planted bug in what the backend gives
// it: the graph node at node loses its dependency on node dep.
type dropEdge struct {
	*cudafake.Driver
	node, dep int
	dropped   bool
}

func (d *dropEdge) NewGraph(nodes []cuda.GraphNode) (cuda.Graph, error) {
	nodes = slices.Clone(nodes)
	if i := slices.Index(nodes[d.node].Deps, d.dep); i >= 0 {
		nodes[d.node].Deps = slices.Delete(slices.Clone(nodes[d.node].Deps), i, i+1)
		d.dropped = true
	}
	return d.Driver.NewGraph(nodes)
}

// TestGraphOrdersEqualLaunchList decodes tokens with an emulated decode
// plan replayed as a graph, its nodes in a new random order at each Run,
// and with graphs off: the logits agree bit for bit at every step. With
// one hazard edge dropped (the first product's dependency on the RMSNorm
// before it, a read after write), some order runs the product early and
// the logits differ: the check can fail.
func TestGraphOrdersEqualLaunchList(t *testing.T) {
	x := NewEmulator(t, nil)
	seed := testenv.Seed(t)
	const steps = 10
	decode := func(t *testing.T, graphs bool, wrap func(*cudafake.Driver) cuda.Driver) [][]float32 {
		if graphs {
			t.Setenv(envvar.CUDAGraphs.Name(), "")
		} else {
			t.Setenv(envvar.CUDAGraphs.Name(), "off")
		}
		f := cudafake.New(x.Exec)
		f.SetSeed(seed)
		var drv cuda.Driver = f
		if wrap != nil {
			drv = wrap(f)
		}
		be := cuda.NewWithDriver(drv)
		defer be.Close()
		d := buildDecode(t, be, tinyDecode, 2)
		defer d.free()
		var out [][]float32
		token := int32(3)
		for pos := range int32(steps) {
			d.write(t, token, pos)
			if err := d.plan.Run(); err != nil {
				t.Fatal(err)
			}
			logits := make([]float32, tinyDecode.vocab)
			next := make([]int32, 1)
			if err := d.plan.Read(d.logits, logits); err != nil {
				t.Fatal(err)
			}
			if err := d.plan.Read(d.next, next); err != nil {
				t.Fatal(err)
			}
			out = append(out, logits)
			token = next[0]
		}
		if graphs {
			if s := be.Stats(); s.GraphLaunches != steps-1 {
				t.Fatalf("%d graph launches, want %d", s.GraphLaunches, steps-1)
			}
		}
		return out
	}
	want := decode(t, false, nil)
	differs := func(got [][]float32) int {
		for i := range got {
			if !slices.Equal(got[i], want[i]) {
				return i
			}
		}
		return -1
	}
	if i := differs(decode(t, true, nil)); i >= 0 {
		t.Fatalf("step %d: the graph's logits differ from the launch list's", i)
	}

	// The planted bug: find the first matvec and the rms_norm it reads.
	probe, _ := fakeBackend(t, true, nil)
	pd := buildDecode(t, probe, tinyDecode, 2)
	pd.write(t, 3, 0)
	if err := pd.plan.Run(); err != nil {
		t.Fatal(err)
	}
	names := cuda.Launched(pd.plan)
	pd.free()
	probe.Close()
	mv := slices.IndexFunc(names, func(n string) bool { return n == "matvec_f32" })
	norm := slices.Index(names, "rms_norm_f32")
	if mv < 0 || norm < 0 || norm > mv {
		t.Fatalf("no rms_norm then matvec in %v", names)
	}
	var planted *dropEdge
	got := decode(t, true, func(f *cudafake.Driver) cuda.Driver {
		planted = &dropEdge{Driver: f, node: mv, dep: norm}
		return planted
	})
	if !planted.dropped {
		t.Fatalf("node %d (%s) has no dependency on node %d (%s) to drop", mv, names[mv], norm, names[norm])
	}
	if i := differs(got); i < 0 {
		t.Errorf("with the edge %d → %d dropped, %d graph replays in random orders all equal the launch list", norm, mv, steps-1)
	} else {
		t.Logf("with the edge %d → %d dropped, step %d differs", norm, mv, i)
	}
}

// TestGreedyGraphsOnEqualsOff: greedy decoding of the demo model on the
// emulated backend with graphs (replayed in random node orders) gives the
// same tokens as with REDRAFTER_CUDA_GRAPHS=off, and the graphs were used.
func TestGreedyGraphsOnEqualsOff(t *testing.T) {
	if testing.Short() {
		t.Skip("emulated generations")
	}
	Builder(t)
	root, err := tools.Root()
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(root, "models", "stories260K", "stories260K.gguf")
	var on *cuda.Backend
	graph.RegisterForTest(t, "cuda-emu-graphs", func() (graph.Backend, error) {
		on = NewEmulated(t)
		return on, nil
	})
	graph.RegisterForTest(t, "cuda-emu", func() (graph.Backend, error) { return NewEmulated(t), nil })
	const n = 10
	t.Setenv(envvar.CUDAGraphs.Name(), "off")
	want := generate(t, model, "cuda-emu", "f32", "", 0, 0, "Once upon a time", n).Tokens
	t.Setenv(envvar.CUDAGraphs.Name(), "")
	got := generate(t, model, "cuda-emu-graphs", "f32", "", 0, 0, "Once upon a time", n).Tokens
	if !slices.Equal(got, want) {
		t.Errorf("graphs on: %v\ngraphs off: %v", got, want)
	}
	if s := on.Stats(); s.GraphLaunches < n-2 || s.GraphBuilds == 0 {
		t.Errorf("graphs on: %+v, want a graph launched for each decode step after the first", s)
	}
}

// TestInputBlockWrites: a plan's inputs share one device buffer with a
// host copy. Writes in any order, some inputs left as they were, reach the
// device in one copy per Run that leaves the unwritten inputs' values
// alone; a write staged into a plan freed before its Run is dropped, not
// copied into freed memory.
func TestInputBlockWrites(t *testing.T) {
	be, f := fakeBackend(t, true, nil)
	defer be.Close()
	g := graph.New()
	a, b, c := g.Input("a", graph.F32, 3), g.Input("b", graph.F32, 70), g.Input("c", graph.F32, 3)
	p, err := graph.Compile(be, graph.Add(a, c), graph.Argmax(graph.Reshape(b, 7, 10)))
	if err != nil {
		t.Fatal(err)
	}
	bv := make([]float32, 70)
	for i := range bv {
		bv[i] = float32(i)
	}
	run := func(writes ...func() error) {
		t.Helper()
		for _, w := range writes {
			if err := w(); err != nil {
				t.Fatal(err)
			}
		}
		before := f.Calls().AsyncCopies
		if err := p.Run(); err != nil {
			t.Fatal(err)
		}
		if n := f.Calls().AsyncCopies - before; n != 1 {
			t.Errorf("%d asynchronous copies for %d writes, want 1", n, len(writes))
		}
	}
	write := func(x *graph.Array, v any) func() error { return func() error { return p.Write(x, v) } }
	run(write(a, []float32{1, 2, 3}), write(b, bv), write(c, []float32{4, 5, 6}))
	run(write(c, []float32{7, 8, 9}), write(a, []float32{-1, -2, -3})) // b, between them, stays
	run(write(a, []float32{-4, -5, -6}))
	gotA, gotB, gotC := make([]float32, 3), make([]float32, 70), make([]float32, 3)
	for _, r := range []struct {
		x *graph.Array
		v any
	}{{a, gotA}, {b, gotB}, {c, gotC}} {
		if err := p.Read(r.x, r.v); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(gotA, []float32{-4, -5, -6}) || !slices.Equal(gotB, bv) || !slices.Equal(gotC, []float32{7, 8, 9}) {
		t.Errorf("device inputs a %v, b %v, c %v", gotA, gotB, gotC)
	}
	if err := p.Write(a, []float32{0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	p.Free()
	before := f.Calls().AsyncCopies
	q, err := graph.Compile(be, graph.Add(g.Input("x", graph.F32, 2), g.Input("y", graph.F32, 2)))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Free()
	if err := q.Run(); err != nil {
		t.Fatalf("a Run after a plan with a staged write was freed: %v", err)
	}
	if n := f.Calls().AsyncCopies - before; n != 0 {
		t.Errorf("%d asynchronous copies after the written plan was freed, want 0", n)
	}
}
