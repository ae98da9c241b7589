package cpu

import "math"

// LogSoftmaxOp, ArgmaxOp, TopKOp; mirrors internal/backend/metal/reduce.go.

// logSoftmax over rows of length v: x - max - log(Σ exp(x - max)), with the
// sum in float64 so that long vocabularies lose nothing.
func logSoftmax(y, x []float32, v int) {
	for r := 0; r < len(x); r += v {
		xr, yr := x[r:r+v], y[r:r+v]
		mx := xr[0]
		for _, e := range xr {
			mx = max(mx, e)
		}
		var s float64
		for _, e := range xr {
			s += math.Exp(float64(e - mx))
		}
		lse := mx + float32(math.Log(s))
		for i, e := range xr {
			yr[i] = e - lse
		}
	}
}

// argmax per row; ties go to the lowest index.
func argmax(y []int32, x []float32, v int) {
	for r := range y {
		xr := x[r*v : (r+1)*v]
		best := 0
		for i, e := range xr {
			if e > xr[best] {
				best = i
			}
		}
		y[r] = int32(best)
	}
}

// topK keeps, per row, the k largest values' indices in descending order
// (ties: lowest index first) by insertion into a short sorted list, which is
// O(V·k) worst case and O(V) for the usual k ≪ V.
func topK(y []int32, x []float32, v, k int) {
	for r := 0; r < len(x)/v; r++ {
		xr := x[r*v : (r+1)*v]
		idx := y[r*k : (r+1)*k]
		n := 0
		for i, e := range xr {
			if n == k && !(e > xr[idx[k-1]]) {
				continue
			}
			j := min(n, k-1)
			for j > 0 && e > xr[idx[j-1]] {
				idx[j] = idx[j-1]
				j--
			}
			idx[j] = int32(i)
			if n < k {
				n++
			}
		}
	}
}
