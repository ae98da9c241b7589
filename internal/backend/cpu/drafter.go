package cpu

import (
	"math"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// RNNStepOp, WarpLogSoftmaxOp, BeamTopOp; mirrors internal/backend/metal/drafter.go.

// rnnStep computes SiLU(e·wᵀ + s·uᵀ + b) with the matmul and SiLU kernels,
// in the unfused graph's order, so it equals that graph exactly on either
// backend.
func (b *Backend) rnnStep(out graph.Operand, in []graph.Operand) error {
	e, s, w, u, bias := in[0], in[1], in[2], in[3], f32(in[4])
	m, n := e.Shape[0], w.Shape[0]
	if err := b.matmul(out, e, w); err != nil {
		return err
	}
	// s·uᵀ goes to scratch memory of this call's own.
	scratch := b.scratch(m * n)
	defer b.release(scratch)
	su := *scratch
	tmp := out
	tmp.Buf, tmp.Off = &buffer{b: graph.AsBytes(su)}, 0
	if err := b.matmul(tmp, s, u); err != nil {
		return err
	}
	y := f32(out)
	for i := range m {
		row, sr := y[i*n:(i+1)*n], su[i*n:(i+1)*n]
		for j := range row {
			row[j] = (row[j] + sr[j]) + bias[j]
		}
	}
	b.silu(y, y)
	return nil
}

// warpLogSoftmax is WarpLogSoftmaxOp on rows of length v, with the host
// beam search's arithmetic (internal/model/drafter): the K-th largest of x minus the
// maximum is the K-th largest of x - max, since rounding is monotonic, and
// the sum over the kept values is in float64.
func warpLogSoftmax(y, x []float32, v int, op graph.WarpLogSoftmaxOp) {
	var sorted []float32
	for r := 0; r < len(x); r += v {
		xr, yr := x[r:r+v], y[r:r+v]
		mx := float32(math.Inf(-1))
		finite := true
		for _, e := range xr {
			finite = finite && e-e == 0 // false for NaN and ±Inf
			if e > mx {
				mx = e
			}
		}
		if !finite {
			for i := range yr {
				yr[i] = float32(math.NaN())
			}
			continue
		}
		kth := float32(math.Inf(-1))
		if v > op.K {
			sorted = append(sorted[:0], xr...)
			slices.Sort(sorted)
			kth = sorted[v-op.K] - mx
		}
		var sum float64
		for i, e := range xr {
			d := e - mx
			if d < kth {
				yr[i] = op.Masked
				continue
			}
			yr[i] = d
			sum += math.Exp(float64(d))
		}
		lse := float32(math.Log(sum))
		for i := range yr {
			yr[i] -= lse
		}
	}
}

// beamTop is BeamTopOp: lp is [rows, v]; beams and out are [3, B] and
// [3, w] (row, token, score bits). It keeps the w best pairs in a sorted
// list, inserting after equal scores, so that ties go to the lower flat
// index, as the host beam search does.
func beamTop(out, beams []int32, lp []float32, rows, v, w int) {
	nb := len(beams) / 3
	score := beams[2*nb:]
	rowOut, tokOut, scoreOut := out[:w], out[w:2*w], out[2*w:]
	best := make([]float32, w)
	n := 0
	nan := false
	for b := range nb {
		row := 0
		if rows > 1 {
			row = b
		}
		sb := math.Float32frombits(uint32(score[b]))
		for t, q := range lp[row*v : (row+1)*v] {
			s := sb + q
			if q-q != 0 { // NaN or ±Inf
				nan = true
			}
			if n == w && !(s > best[w-1]) {
				continue
			}
			j := min(n, w-1)
			for j > 0 && s > best[j-1] {
				best[j], rowOut[j], tokOut[j] = best[j-1], rowOut[j-1], tokOut[j-1]
				j--
			}
			best[j], rowOut[j], tokOut[j] = s, int32(row), int32(t)
			if n < w {
				n++
			}
		}
	}
	for i := range w {
		if nan {
			best[i] = float32(math.NaN())
		}
		scoreOut[i] = int32(math.Float32bits(best[i]))
	}
}
