package cpu

import (
	"math"
	"testing"
)

func TestFastSigmoid(t *testing.T) {
	for x := float32(-100); x <= 100; x += 0.013 {
		got, want := fastSigmoid(x), sigmoid(x)
		if d := math.Abs(float64(got - want)); d > 1e-6*math.Max(1e-30, float64(want)) && d > 1e-12 {
			t.Fatalf("fastSigmoid(%g) = %g, want %g", x, got, want)
		}
	}
}
