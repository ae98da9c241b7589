// Package sample turns next-token logits into a sampling distribution and
// draws tokens from it: temperature, top-k and top-p (nucleus) filtering,
// greedy argmax, and inverse-CDF draws from a caller-owned random source.
//
// The filters are applied in Hugging Face transformers' order: temperature,
// then top-k, then top-p (TemperatureLogitsWarper, TopKLogitsWarper,
// TopPLogitsWarper). llama.cpp's default chain applies temperature last, after
// top-p; the two agree when Temperature is 1 or TopP is off, and otherwise
// keep different nuclei.
//
// Distributions are float64 slices: the softmax, the nucleus sums and the
// renormalisation are done in float64, so a distribution sums to 1 within a
// few ulps, and speculative-sampling code can subtract and renormalise it
// without float32 rounding.
//
// The package is a leaf: it imports nothing from this module.
package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params selects a sampling distribution. The zero value is greedy decoding.
type Params struct {
	// Temperature divides the logits. 0 means greedy: the distribution is
	// one-hot at the argmax (Validate refuses a negative one).
	Temperature float32
	// TopK keeps the K largest logits; 0 (or K >= vocabulary size) keeps all.
	// As in transformers, logits tied with the K-th largest are kept too, so
	// more than K tokens can survive.
	TopK int
	// TopP keeps the smallest set of most probable tokens whose mass is at
	// least TopP (at least one token); 0 or 1 keeps all (Validate refuses
	// a TopP outside [0, 1]).
	TopP float32
}

// Validate reports parameters that have no meaning: a Temperature that is
// negative, NaN or infinite, a negative TopK, a TopP outside [0, 1] or NaN.
func (p Params) Validate() error {
	t := float64(p.Temperature)
	switch {
	case math.IsNaN(t) || math.IsInf(t, 0) || t < 0:
		return fmt.Errorf("sample: temperature %g: want a finite number >= 0 (0: greedy)", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sample: top-k %d: want 0 (off) or more", p.TopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("sample: top-p %g: want a number in (0, 1] (0: off)", p.TopP)
	}
	return nil
}

// Greedy reports whether p means greedy (argmax) decoding.
func (p Params) Greedy() bool { return !(p.Temperature > 0) }

func (p Params) String() string {
	if p.Greedy() {
		return "greedy"
	}
	return fmt.Sprintf("T=%g top-k=%d top-p=%g", p.Temperature, p.TopK, p.TopP)
}

// topPSlack absorbs the rounding of TopP to float32 and of the logits, so
// that TopP = 0.8 over probabilities 0.5, 0.3, 0.2 keeps two tokens although
// float32(0.8) > 0.8 and 0.5+0.3 may round below it.
const topPSlack = 1e-6

// Probs writes the sampling distribution for logits under p into dst:
// dst[i] is the probability of token i, zero for filtered tokens, and the
// kept entries sum to 1. len(dst) must equal len(logits).
//
// Greedy parameters give a one-hot distribution at Argmax(logits), so code
// written for sampling (for example exact speculative acceptance) reduces to
// greedy decoding. Otherwise the logits are divided by Temperature, filtered
// by TopK then TopP (see the package comment for the order), and
// softmax-normalised in float64. Ties in the nucleus are broken towards the
// lower token id.
//
// Logits may be -Inf (masked). A NaN or +Inf logit, or no finite one, has no
// distribution: Probs returns an error and dst holds nothing usable (greedy
// parameters still give the one-hot at Argmax, which skips NaN). It panics
// only when len(dst) != len(logits) or they are empty.
func Probs(dst []float64, logits []float32, p Params) error {
	if len(dst) != len(logits) || len(logits) == 0 {
		panic(fmt.Sprintf("sample: Probs: len(dst) = %d, len(logits) = %d", len(dst), len(logits)))
	}
	if p.Greedy() {
		clear(dst)
		dst[Argmax(logits)] = 1
		return nil
	}
	invT := 1 / float64(p.Temperature)
	maxv := math.Inf(-1)
	for i, l := range logits {
		v := float64(l) * invT
		if math.IsNaN(v) || math.IsInf(v, 1) {
			return fmt.Errorf("sample: logit %d is %v", i, l)
		}
		dst[i] = v
		maxv = max(maxv, v)
	}
	if math.IsInf(maxv, -1) {
		return fmt.Errorf("sample: no finite logit among %d", len(logits))
	}
	if p.TopK > 0 && p.TopK < len(dst) {
		kth := kthLargest(dst, p.TopK)
		for i, v := range dst {
			if v < kth {
				dst[i] = math.Inf(-1)
			}
		}
	}
	// Softmax; masked entries become exactly 0.
	sum := 0.0
	for i, v := range dst {
		if math.IsInf(v, -1) {
			dst[i] = 0
			continue
		}
		e := math.Exp(v - maxv)
		dst[i] = e
		sum += e
	}
	scale(dst, sum)
	if p.TopP > 0 && p.TopP < 1 {
		nucleus(dst, float64(p.TopP))
	}
	return nil
}

// nucleus keeps the smallest set of most probable entries of the normalised
// distribution d whose mass reaches top (within topPSlack) and renormalises.
func nucleus(d []float64, top float64) {
	kept := 0
	for _, v := range d {
		if v > 0 {
			kept++
		}
	}
	// Only entries >= (1-top)/kept can be in the nucleus: the others hold
	// less than kept·(1-top)/kept = 1-top in total, so the candidates alone
	// hold more than top. Sorting just the candidates keeps this O(V) in the
	// usual peaked case.
	thresh := (1 - top) / float64(kept)
	var cand []int32
	for i, v := range d {
		if v > 0 && v >= thresh {
			cand = append(cand, int32(i))
		}
	}
	slices.SortFunc(cand, func(a, b int32) int {
		if c := cmp.Compare(d[b], d[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	m, cum := len(cand), 0.0
	for j, i := range cand {
		cum += d[i]
		if cum >= top-topPSlack {
			m = j + 1
			break
		}
	}
	for _, i := range cand[m:] {
		d[i] = 0
	}
	sum := 0.0
	for i, v := range d {
		if v < thresh {
			d[i] = 0
		} else {
			sum += v
		}
	}
	scale(d, sum)
}

func scale(d []float64, sum float64) {
	inv := 1 / sum
	for i := range d {
		d[i] *= inv
	}
}

// kthLargest returns the k-th largest value of x (1 <= k < len(x)) with a
// size-k min-heap: O(V log k) time, O(k) space.
func kthLargest(x []float64, k int) float64 {
	h := make([]float64, 0, k)
	for _, v := range x {
		if len(h) < k {
			h = append(h, v)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if h[p] <= h[i] {
					break
				}
				h[p], h[i] = h[i], h[p]
				i = p
			}
			continue
		}
		if v <= h[0] {
			continue
		}
		h[0] = v
		for i := 0; ; {
			l, s := 2*i+1, i
			if l < k && h[l] < h[s] {
				s = l
			}
			if l+1 < k && h[l+1] < h[s] {
				s = l + 1
			}
			if s == i {
				break
			}
			h[i], h[s] = h[s], h[i]
			i = s
		}
	}
	return h[0]
}

// Argmax returns the index of the largest logit; ties go to the lowest index
// and NaN entries are never chosen (all NaN gives 0). It panics on an empty
// slice.
func Argmax(logits []float32) int32 {
	if len(logits) == 0 {
		panic("sample: Argmax of no logits")
	}
	best := -1
	var bv float32
	for i, v := range logits {
		if v == v && (best < 0 || v > bv) {
			best, bv = i, v
		}
	}
	return int32(max(best, 0))
}

// Draw returns a token drawn from probs by inverse CDF, consuming exactly one
// rng.Float64(). probs must be non-negative with a positive sum; it need not
// be normalised (the draw is proportional to the entries), and a zero entry is
// never drawn.
func Draw(probs []float64, rng *rand.Rand) int32 {
	total := 0.0
	for _, v := range probs {
		total += v
	}
	if !(total > 0) || math.IsInf(total, 1) {
		panic(fmt.Sprintf("sample: Draw from a distribution with total mass %v", total))
	}
	u := rng.Float64() * total
	cum, last := 0.0, -1
	for i, v := range probs {
		if v <= 0 {
			continue
		}
		cum += v
		last = i
		if u < cum {
			return int32(i)
		}
	}
	// u rounded above the running sum: the last positive entry.
	return int32(last)
}
