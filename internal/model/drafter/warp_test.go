package drafter

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// warpLogSoftmax must give the reference's bits: random rows, rows with
// many ties at the 50th value, rows shorter than 50, and rows whose values
// differ by less than their rounding after the max is subtracted.
func TestWarpLogSoftmaxMatchesReference(t *testing.T) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 3))
	var heap []float32
	for trial := range 300 {
		v := []int{1, 7, 50, 51, 64, 512, 32000}[trial%7]
		x := make([]float32, v)
		kind := trial / 7 % 4
		for i := range x {
			switch kind {
			case 0: // spread logits
				x[i] = float32(r.NormFloat64() * 4)
			case 1: // few distinct values: ties around the 50th
				x[i] = float32(r.IntN(6))
			case 2: // values close together far from zero: x-mx rounds them together
				x[i] = 1000 + float32(r.IntN(1<<12))*(1.0/(1<<14))
			default: // ascending: every element enters the heap
				x[i] = float32(i) * 0.01
			}
		}
		got := make([]float32, v)
		warpLogSoftmax(got, x, &heap)
		want := refWarpLogSoftmax(x)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("trial %d (V=%d, kind %d, seed %d): [%d] = %v, reference %v", trial, v, kind, seed, i, got[i], want[i])
			}
		}
	}
}

func BenchmarkWarpLogSoftmax(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 32000)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	dst := make([]float32, len(x))
	var heap []float32
	for b.Loop() {
		warpLogSoftmax(dst, x, &heap)
	}
}
