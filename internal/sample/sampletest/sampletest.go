// Package sampletest provides goodness-of-fit helpers for tests of samplers:
// Pearson's chi-square test with pooling of sparse cells, and the chi-square
// upper tail probability it needs.
package sampletest

import (
	"fmt"
	"math"
)

// ChiSquare runs Pearson's chi-square test of observed counts against the
// cell probabilities probs (which must sum to 1). Cells whose expected count
// is below minExpected (5 is the usual rule) are pooled into one cell, and a
// pool that is still too small is merged into the smallest remaining cell.
// A count in a cell of probability 0 makes the fit impossible: stat is +Inf
// and p is 0. df is the number of cells after pooling minus one.
func ChiSquare(observed []int, probs []float64, minExpected float64) (stat float64, df int, p float64) {
	if len(observed) != len(probs) {
		panic(fmt.Sprintf("sampletest: %d counts for %d cells", len(observed), len(probs)))
	}
	total := 0
	for _, o := range observed {
		total += o
	}
	n := float64(total)
	type cell struct{ o, e float64 }
	var cells []cell
	var pool cell
	for i, pr := range probs {
		o, e := float64(observed[i]), pr*n
		if pr == 0 {
			if o > 0 {
				return math.Inf(1), 0, 0
			}
			continue
		}
		if e < minExpected {
			pool.o += o
			pool.e += e
			continue
		}
		cells = append(cells, cell{o, e})
	}
	if pool.e > 0 {
		if pool.e >= minExpected || len(cells) == 0 {
			cells = append(cells, pool)
		} else {
			s := 0
			for i := range cells {
				if cells[i].e < cells[s].e {
					s = i
				}
			}
			cells[s].o += pool.o
			cells[s].e += pool.e
		}
	}
	for _, c := range cells {
		d := c.o - c.e
		stat += d * d / c.e
	}
	df = len(cells) - 1
	if df < 1 {
		return stat, df, 1
	}
	return stat, df, ChiSquareSF(stat, df)
}

// ChiSquareSF is the upper tail P(X >= x) of the chi-square distribution
// with df degrees of freedom: the regularised upper incomplete gamma
// function Q(df/2, x/2).
func ChiSquareSF(x float64, df int) float64 {
	if x <= 0 {
		return 1
	}
	return gammaQ(float64(df)/2, x/2)
}

// gammaQ is Q(a, x) = Γ(a, x)/Γ(a), by the power series of P(a, x) when
// x < a+1 and by the continued fraction of Q (modified Lentz) otherwise.
func gammaQ(a, x float64) float64 {
	lg, _ := math.Lgamma(a)
	front := math.Exp(a*math.Log(x) - x - lg)
	if x < a+1 {
		// P(a,x) = x^a e^-x / Γ(a+1) · Σ_k x^k / ((a+1)…(a+k)).
		term, sum := 1/a, 1/a
		for k := 1; k < 10000; k++ {
			term *= x / (a + float64(k))
			sum += term
			if term < sum*1e-16 {
				break
			}
		}
		return max(0, 1-front*sum)
	}
	// Q(a,x) = x^a e^-x / Γ(a) · 1/(x+1-a- 1·(1-a)/(x+3-a- 2·(2-a)/(x+5-a- …))).
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for k := 1; k < 10000; k++ {
		an := -float64(k) * (float64(k) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		delta := d * c
		h *= delta
		if math.Abs(delta-1) < 1e-16 {
			break
		}
	}
	return front * h
}
