package kernels

// matMulAffineGeneric is the pure-Go MatMulAffine: for each group, the
// integer-weighted sum Σ x·q in four accumulators, then
// acc += s·(Σ x·q) + b·(Σ x), with each group's x sum computed once per row
// of x.
func matMulAffineGeneric(y []float32, ldy int, x []float32, m int, w *AffineRows, n int) {
	k, gs := w.K, w.GroupSize
	groups := k / gs
	words := k * w.Bits / 32
	gw := gs * w.Bits / 32 // words per group
	xsum := make([]float32, m*groups)
	for i := range m {
		for g := range groups {
			var s float32
			for _, v := range x[i*k+g*gs : i*k+(g+1)*gs] {
				s += v
			}
			xsum[i*groups+g] = s
		}
	}
	for j := range n {
		codes := w.Codes[j*words : (j+1)*words]
		for i := range m {
			xr := x[i*k : (i+1)*k]
			var acc float32
			for g := range groups {
				var dq float32
				if w.Bits == 4 {
					dq = dotCodes4(xr[g*gs:(g+1)*gs], codes[g*gw:(g+1)*gw])
				} else {
					dq = dotCodes8(xr[g*gs:(g+1)*gs], codes[g*gw:(g+1)*gw])
				}
				s := w.ScaleType.at(w.Scales, j*groups+g)
				b := w.ScaleType.at(w.Biases, j*groups+g)
				acc += float32(s*dq) + float32(b*xsum[i*groups+g])
			}
			y[i*ldy+j] = acc
		}
	}
}

// dotCodes4 returns Σ x[e]·q[e] over the 4-bit codes of words.
func dotCodes4(x []float32, words []uint32) float32 {
	var a0, a1, a2, a3 float32
	for wi, c := range words {
		xx := x[wi*8 : wi*8+8 : wi*8+8]
		a0 += xx[0]*float32(c&15) + xx[4]*float32(c>>16&15)
		a1 += xx[1]*float32(c>>4&15) + xx[5]*float32(c>>20&15)
		a2 += xx[2]*float32(c>>8&15) + xx[6]*float32(c>>24&15)
		a3 += xx[3]*float32(c>>12&15) + xx[7]*float32(c>>28)
	}
	return (a0 + a1) + (a2 + a3)
}

// dotCodes8 returns Σ x[e]·q[e] over the 8-bit codes of words.
func dotCodes8(x []float32, words []uint32) float32 {
	var a0, a1, a2, a3 float32
	for wi, c := range words {
		xx := x[wi*4 : wi*4+4 : wi*4+4]
		a0 += xx[0] * float32(c&255)
		a1 += xx[1] * float32(c>>8&255)
		a2 += xx[2] * float32(c>>16&255)
		a3 += xx[3] * float32(c>>24)
	}
	return (a0 + a1) + (a2 + a3)
}
