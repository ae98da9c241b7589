package graph_test

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// counting wraps a backend and records allocations and support queries.
type counting struct {
	graph.Backend
	allocs  int
	refuse  string
	lastRun *graph.Plan
}

func (c *counting) Alloc(n int) (graph.Buffer, error) {
	c.allocs++
	return c.Backend.Alloc(n)
}

func (c *counting) Supports(op graph.Op, in []graph.DType) bool {
	return c.refuse == "" || !strings.HasPrefix(op.String(), c.refuse)
}

// A chain of same-shaped ops needs two intermediate buffers, not one per
// node, and the result is still right.
func TestPlannerReusesBuffers(t *testing.T) {
	be := &counting{Backend: cpu.NewReference()}
	g := graph.New()
	x := g.Input("x", graph.F32, 4, 8)
	y := x
	for range 10 {
		y = graph.SiLU(y)
	}
	out := graph.Add(y, x)
	p, err := graph.Compile(be, out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if len(p.Steps) != 11 {
		t.Errorf("%d steps, want 11", len(p.Steps))
	}
	if be.allocs > 3 { // the input, and two alternating intermediates
		t.Errorf("%d allocations for a chain of 11 ops", be.allocs)
	}
	in := make([]float32, 32)
	for i := range in {
		in[i] = float32(i)/8 - 2
	}
	if err := p.Write(x, in); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 32)
	if err := p.Read(out, got); err != nil {
		t.Fatal(err)
	}
	// Same computation with every intermediate kept alive (as outputs).
	g2 := graph.New()
	x2 := g2.Input("x", graph.F32, 4, 8)
	var all []*graph.Array
	y2 := x2
	for range 10 {
		y2 = graph.SiLU(y2)
		all = append(all, y2)
	}
	out2 := graph.Add(y2, x2)
	var want []float32
	err = graph.Eval(be, map[*graph.Array]any{x2: in}, func(p *graph.Plan) error {
		want = make([]float32, 32)
		return p.Read(out2, want)
	}, append(all, out2)...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: %v with buffer reuse, %v without", i, got[i], want[i])
		}
	}
}

// A view shares its source's storage, which must stay alive while the view is read.
func TestPlannerKeepsViewedStorage(t *testing.T) {
	be := cpu.NewReference()
	g := graph.New()
	x := g.Input("x", graph.F32, 2, 6)
	a := graph.SiLU(x)
	v := graph.Reshape(a, 3, 4)
	b := graph.SiLU(graph.Reshape(x, 3, 4)) // allocated while v is still live
	out := graph.Add(v, b)
	in := []float32{-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	err := graph.Eval(be, map[*graph.Array]any{x: in}, func(p *graph.Plan) error {
		got := make([]float32, 12)
		if err := p.Read(out, got); err != nil {
			return err
		}
		for i, xv := range in {
			s := xv / (1 + expNeg(xv))
			if d := got[i] - 2*s; d > 1e-5 || d < -1e-5 {
				t.Errorf("element %d = %v, want %v", i, got[i], 2*s)
			}
		}
		return nil
	}, out)
	if err != nil {
		t.Fatal(err)
	}
}

func expNeg(x float32) float32 { return float32(math.Exp(float64(-x))) }

func TestCompileRefusesUnsupportedOps(t *testing.T) {
	be := &counting{Backend: cpu.NewReference(), refuse: "SiLU"}
	g := graph.New()
	x := g.Input("x", graph.F32, 2)
	_, err := graph.Compile(be, graph.SiLU(x))
	if err == nil || !strings.Contains(err.Error(), "does not support SiLU") {
		t.Errorf("err = %v", err)
	}
}

func TestShapeErrorsPanicWithBothShapes(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "[2,3]") || !strings.Contains(r.(string), "[4,5]") {
			t.Errorf("panic = %v", r)
		}
	}()
	g := graph.New()
	graph.MatMul(g.Input("x", graph.F32, 2, 3), g.Input("w", graph.F32, 4, 5))
}

func TestOpenUnknownBackend(t *testing.T) {
	if _, err := graph.Open("tpu"); err == nil || !strings.Contains(err.Error(), `unknown backend "tpu"`) {
		t.Errorf("err = %v", err)
	}
	if _, err := graph.Open("cuda"); err == nil || !strings.Contains(err.Error(), "not in this build") {
		t.Errorf("cuda: err = %v, want it to say the backend is not in this build", err)
	}
	// A program that did not import the public registration package is
	// told which import registers the backend.
	for name, pkg := range map[string]string{
		"metal": "github.com/seed9b8f47b1/redrafter/backend/metal",
		"cuda":  "github.com/seed9b8f47b1/redrafter/backend/cuda",
	} {
		if _, err := graph.Open(name); err == nil || !strings.Contains(err.Error(), "imports "+pkg) {
			t.Errorf("%s: err = %v, want it to name the import %s", name, err, pkg)
		}
	}
	be, err := graph.Open("auto")
	if err != nil || be.Name() != "cpu" {
		t.Errorf("auto on Linux: %v, %v", be, err)
	}
}

// TestOpenAutoSkipsBrokenBackend: a GPU backend that fails to open (as
// Metal does when its kernels do not build) leaves auto on the CPU, with
// a warning that says why.
func TestOpenAutoSkipsBrokenBackend(t *testing.T) {
	graph.RegisterForTest(t, "metal", func() (graph.Backend, error) {
		return nil, errors.New("compiling internal/backend/metal/shaders/norm.metal: error: use of undeclared identifier")
	})
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))

	be, err := graph.Open("auto")
	if err != nil || be.Name() != "cpu" {
		t.Fatalf("auto: %v, %v", be, err)
	}
	if l := logs.String(); !strings.Contains(l, "WARN") || !strings.Contains(l, "norm.metal") || !strings.Contains(l, "using=cpu") {
		t.Errorf("log: %q", l)
	}
	if _, err := graph.Open("metal"); err == nil || !strings.Contains(err.Error(), "norm.metal") {
		t.Errorf("metal: %v", err)
	}
}

// A Slice is a view: it costs no step, and the ops that read it see the
// rows it names, at their offset in the source's storage.
func TestSliceIsAViewOfRows(t *testing.T) {
	g := graph.New()
	x := g.Input("x", graph.I32, 3, 2)
	idx := g.Input("idx", graph.I32, 2)
	mid := graph.Slice(x, 1, 3)
	out := graph.GatherRows(mid, idx)
	p, err := graph.Compile(cpu.NewReference(), out, mid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if len(p.Steps) != 1 {
		t.Errorf("steps %v, want only the GatherRows", p.Steps)
	}
	if o := p.Operand(mid); o.Off != 8 || !o.Shape.Equal(graph.Shape{2, 2}) {
		t.Errorf("Slice[1:3] operand at offset %d shape %v, want 8 and [2,2]", o.Off, o.Shape)
	}
	if err := p.Write(x, []int32{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(idx, []int32{1, 0}); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, 4)
	if err := p.Read(out, got); err != nil {
		t.Fatal(err)
	}
	if want := []int32{5, 6, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("rows [1, 0] of Slice[1:3] = %v, want %v", got, want)
	}
}

func TestCheckWriteRead(t *testing.T) {
	if err := graph.CheckWrite("x", 4, 4, 8); err != nil {
		t.Errorf("in bounds: %v", err)
	}
	for _, c := range [][3]int{{-1, 1, 8}, {5, 4, 8}} {
		if err := graph.CheckWrite("x", c[0], c[1], c[2]); err == nil || !strings.HasPrefix(err.Error(), "x: write of") {
			t.Errorf("write %v: %v", c, err)
		}
		if err := graph.CheckRead("x", c[0], c[1], c[2]); err == nil || !strings.HasPrefix(err.Error(), "x: read of") {
			t.Errorf("read %v: %v", c, err)
		}
	}
}

// releaser is backend state that records its Release.
type releaser struct{ released int }

func (r *releaser) Release() { r.released++ }

// TestFreeReleasesBackendState: Free calls the state's Release once and
// forgets the state, so a backend's per-plan resources (a CUDA graph) go
// with the plan; freeing twice releases nothing more.
func TestFreeReleasesBackendState(t *testing.T) {
	g := graph.New()
	x := g.Input("x", graph.F32, 4)
	p, err := graph.Compile(cpu.New(1), graph.SiLU(x))
	if err != nil {
		t.Fatal(err)
	}
	r := &releaser{}
	p.BackendState = r
	p.Free()
	p.Free()
	if r.released != 1 || p.BackendState != nil {
		t.Errorf("released %d times, state %v after Free; want once, nil", r.released, p.BackendState)
	}
}

// blocking is the CPU reference as a graph.InputBlocker, recording the
// input blocks it allocated.
type blocking struct {
	counting
	blocks []int // sizes
}

func (b *blocking) AllocInputs(n int) (graph.Buffer, error) {
	b.blocks = append(b.blocks, n)
	return b.Backend.Alloc(n)
}

// TestInputBlockLayout: on an InputBlocker, a plan's inputs lie in one
// buffer from AllocInputs, in the order the graph declares them, each at a
// multiple of graph.InputAlign bytes; an input the outputs do not need
// takes no room; the plan computes what it computes with separate inputs.
func TestInputBlockLayout(t *testing.T) {
	be := &blocking{counting: counting{Backend: cpu.NewReference()}}
	g := graph.New()
	a := g.Input("a", graph.F32, 3)
	g.Input("unused", graph.F32, 1000)
	b := g.Input("b", graph.F32, 70)
	c := g.Input("c", graph.F32, 3)
	sum := graph.Add(a, c)
	p, err := graph.Compile(be, sum, graph.SiLU(b))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	const al = graph.InputAlign // b's 280 bytes take two
	if len(be.blocks) != 1 || be.blocks[0] != 4*al {
		t.Fatalf("input blocks %v, want one of %d bytes", be.blocks, 4*al)
	}
	oa, ob, oc := p.Operand(a), p.Operand(b), p.Operand(c)
	if oa.Buf != ob.Buf || ob.Buf != oc.Buf || oa.Off != 0 || ob.Off != al || oc.Off != 3*al {
		t.Errorf("inputs at offsets %d, %d, %d (same buffer: %v), want 0, %d, %d", oa.Off, ob.Off, oc.Off,
			oa.Buf == ob.Buf && ob.Buf == oc.Buf, al, 3*al)
	}
	if be.allocs != 2 { // the two outputs; no input through Alloc
		t.Errorf("%d allocations besides the input block, want 2", be.allocs)
	}
	if err := p.Write(a, []float32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(c, []float32{10, 20, 30}); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(b, make([]float32, 70)); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	if err := p.Read(sum, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []float32{11, 22, 33}) {
		t.Errorf("a + c = %v, want [11 22 33]", got)
	}
}
