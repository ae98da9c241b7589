package drafter

// Oracles: the reference implementation's algorithms (apple/ml-recurrent-
// drafter, tree_attention.py and recurrent_drafting.py, as described in
// shared/reference/redrafter-algorithm.md §4–5), written the simplest way,
// on unsorted beams.

import (
	"cmp"
	"math"
	"slices"
)

// refDedup is _dedup_prefix: prefixTree[i][t] is the smallest k whose beam
// shares beam i's prefix up to depth t.
func refDedup(beams [][]int32) [][]int {
	pt := make([][]int, len(beams))
	for i, b := range beams {
		pt[i] = make([]int, len(b))
		for t := range b {
			for k := 0; k <= i; k++ {
				if slices.Equal(beams[k][:t+1], b[:t+1]) {
					pt[i][t] = k
					break
				}
			}
		}
	}
	return pt
}

// refPack is the sequential form of _pack_beams and _get_unpacker (§4.3):
// novel tokens beam-major, idx[p] = i·L+t of packed token p.
func refPack(beams [][]int32) (packed []int32, idx []int, unpacker [][]int32) {
	l := len(beams[0])
	pt := refDedup(beams)
	unpacker = make([][]int32, len(beams))
	for i, b := range beams {
		unpacker[i] = make([]int32, l)
		for t := range b {
			if k := pt[i][t]; k != i {
				unpacker[i][t] = unpacker[k][t]
				continue
			}
			unpacker[i][t] = int32(len(packed))
			packed = append(packed, b[t])
			idx = append(idx, i*l+t)
		}
	}
	return packed, idx, unpacker
}

// refMask is the tree part of _get_causal_mask_of_packed_beams (§4.4):
// packed token p = (i,t) sees unpacker[i][0..t].
func refMask(idx []int, unpacker [][]int32) [][]bool {
	l := len(unpacker[0])
	m := make([][]bool, len(idx))
	for p, f := range idx {
		m[p] = make([]bool, len(idx))
		i, t := f/l, f%l
		for s := 0; s <= t; s++ {
			m[p][unpacker[i][s]] = true
		}
	}
	return m
}

// refGreedy is _greedy_choose_from_candidates (§5.1): n_i is the number of
// leading drafts of beam i equal to the LLM's argmax one position earlier
// along the beam; i* is the first beam with the largest n_i.
func refGreedy(beams, beamsByLLM [][]int32) (n []int, best int) {
	n = make([]int, len(beams))
	for i, b := range beams {
		for t := 1; t < len(b) && b[t] == beamsByLLM[i][t-1]; t++ {
			n[i]++
		}
		if n[i] > n[best] {
			best = i
		}
	}
	return n, best
}

// refWarpLogSoftmax is compute_logits as written: y = x - max(x); every y
// below the 50th largest y becomes -50000; then log-softmax, summing
// exp(y) in float64 over the whole row.
func refWarpLogSoftmax(logits []float32) []float32 {
	mx := slices.Max(logits)
	y := make([]float64, len(logits))
	for i, x := range logits {
		y[i] = float64(x - mx)
	}
	kth := math.Inf(-1)
	if len(y) > topLogits {
		sorted := slices.Clone(y)
		slices.SortFunc(sorted, func(a, b float64) int { return cmp.Compare(b, a) })
		kth = sorted[topLogits-1]
	}
	var sum float64
	for i := range y {
		if y[i] < kth {
			y[i] = maskedLogit
		}
		sum += math.Exp(y[i])
	}
	lse := float32(math.Log(sum))
	out := make([]float32, len(y))
	for i := range y {
		out[i] = float32(y[i]) - lse
	}
	return out
}
