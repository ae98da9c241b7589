package metaltest_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/metaltest"
	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

func TestMain(m *testing.M) { os.Exit(metaltest.Main(m)) }

// addMul evaluates (a+b)*b on be.
func addMul(t *testing.T, be graph.Backend) []float32 {
	t.Helper()
	a := []float32{1, 2, 3, 4, 5, 6, 7}
	b := []float32{0.5, -1, 2, 0.25, 3, -2, 1.5}
	g := graph.New()
	x, y := g.Input("a", graph.F32, len(a)), g.Input("b", graph.F32, len(b))
	out := graph.Mul(graph.Add(x, y), y)
	res := make([]float32, len(a))
	if err := graph.Eval(be, map[*graph.Array]any{x: a, y: b}, func(p *graph.Plan) error { return p.Read(out, res) }, out); err != nil {
		t.Fatal(err)
	}
	return res
}

// The emulated kernels compute what the CPU reference does, report the
// kernels they ran, and run an overriding source instead of the embedded
// one.
func TestEmulated(t *testing.T) {
	want := addMul(t, metal.NewFake(metal.Policy{FirstCommit: 1, OpsPerBuffer: 1}, metal.Fake{Reference: cpu.NewReference()}))
	be := metaltest.NewEmulated(t)
	defer be.Close()
	if got := addMul(t, be); !slices.Equal(got, want) {
		t.Errorf("emulated: %v, CPU reference: %v", got, want)
	}

	raw, err := msl.Raw("elementwise.metal")
	if err != nil {
		t.Fatal(err)
	}
	const from, to = "a[i] + bv", "a[i] - bv"
	if !strings.Contains(raw, from) {
		t.Fatalf("elementwise.metal no longer contains %q; update the planted bug", from)
	}
	x := metaltest.NewEmulator(t, map[string]string{"elementwise.metal": strings.Replace(raw, from, to, 1)})
	if got := addMul(t, metal.NewFake(metal.Policy{FirstCommit: 1, OpsPerBuffer: 1}, metal.Fake{Exec: x.Exec})); slices.Equal(got, want) {
		t.Errorf("the planted bug (%q → %q) went unnoticed: %v", from, to, got)
	}
	if ran, want := x.Ran(), map[string]int{"elementwise_add_f32": 1, "elementwise_mul_f32": 1}; !maps.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
}
