package sampletest

import (
	"math"
	"testing"
)

func TestChiSquareSFClosedForms(t *testing.T) {
	for _, x := range []float64{0.01, 0.3, 1, 2.5, 4, 7.9, 15, 40, 90} {
		for _, c := range []struct {
			df   int
			want float64
		}{
			{1, math.Erfc(math.Sqrt(x / 2))},
			{2, math.Exp(-x / 2)},
			{4, math.Exp(-x/2) * (1 + x/2)},
			{6, math.Exp(-x/2) * (1 + x/2 + x*x/8)},
		} {
			got := ChiSquareSF(x, c.df)
			if math.Abs(got-c.want) > 1e-10*c.want {
				t.Errorf("ChiSquareSF(%g, %d) = %.17g, want %.17g", x, c.df, got, c.want)
			}
		}
	}
}

func TestChiSquareSFCriticalValues(t *testing.T) {
	// Upper 5% and 0.01% points of the chi-square distribution.
	for _, c := range []struct {
		x    float64
		df   int
		want float64
	}{
		{3.841458820694124, 1, 0.05},
		{18.307038053275146, 10, 0.05},
		{124.34211340400407, 100, 0.05},
		{15.136705226623606, 1, 1e-4},
		{35.56401394234907, 10, 1e-4},
	} {
		if got := ChiSquareSF(c.x, c.df); math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("ChiSquareSF(%g, %d) = %.12g, want %g", c.x, c.df, got, c.want)
		}
	}
}

func TestChiSquare(t *testing.T) {
	// A perfect fit, a bad fit, pooling and an impossible cell.
	probs := []float64{0.5, 0.25, 0.125, 0.0625, 0.0625}
	if stat, df, p := ChiSquare([]int{800, 400, 200, 100, 100}, probs, 5); stat != 0 || df != 4 || p != 1 {
		t.Errorf("ChiSquare(exact) = %g, %d, %g; want 0, 4, 1", stat, df, p)
	}
	if _, _, p := ChiSquare([]int{950, 350, 150, 75, 75}, probs, 5); p > 1e-6 {
		t.Errorf("ChiSquare(biased) p = %g, want < 1e-6", p)
	}
	// With 40 draws the last three cells (5, 2.5, 2.5 expected) pool: 3 cells.
	if _, df, _ := ChiSquare([]int{20, 10, 5, 3, 2}, probs, 5.1); df != 2 {
		t.Errorf("ChiSquare(pooled) df = %d, want 2", df)
	}
	if stat, _, p := ChiSquare([]int{1, 1}, []float64{1, 0}, 5); !math.IsInf(stat, 1) || p != 0 {
		t.Errorf("ChiSquare(impossible) = %g, p %g; want +Inf, 0", stat, p)
	}
}
