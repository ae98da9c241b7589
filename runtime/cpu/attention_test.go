package cpu

import (
	"math"
	"testing"
)

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x <= 0; x += 0.0007 {
		want := math.Exp(float64(x))
		got := float64(expf(x))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 5e-7 {
		t.Errorf("expf: max relative error %g > 5e-7", worst)
	}
	if expf(0) != 1 || expf(-100) != 0 || expf(float32(math.Inf(-1))) != 0 {
		t.Errorf("expf edge cases: %v %v %v", expf(0), expf(-100), expf(float32(math.Inf(-1))))
	}
}

// The hand-inlined exp in softmax is the same function as expf.
func TestSoftmaxMatchesExpf(t *testing.T) {
	b := New(1)
	x := []float32{0, -1, -3.5, -20, -86.9, -87.1, float32(math.Inf(-1)), 2}
	want := make([]float32, len(x))
	var sum float32
	for i, v := range x {
		want[i] = expf(v - 2)
		sum += want[i]
	}
	got := append([]float32(nil), x...)
	if s := b.softmax(got, 2); s != sum {
		t.Errorf("sum %v, want %v", s, sum)
	}
	for i := range x {
		if got[i] != want[i] {
			t.Errorf("softmax[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestFastSigmoid(t *testing.T) {
	for x := float32(-100); x <= 100; x += 0.013 {
		got, want := fastSigmoid(x), sigmoid(x)
		if d := math.Abs(float64(got - want)); d > 1e-6*math.Max(1e-30, float64(want)) && d > 1e-12 {
			t.Fatalf("fastSigmoid(%g) = %g, want %g", x, got, want)
		}
	}
}
