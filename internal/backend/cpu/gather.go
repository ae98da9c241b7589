package cpu

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// GatherRowsOp, TakeAlongOp; mirrors internal/backend/metal/gather.go.

func gatherRows(out, x, idx graph.Operand) error {
	rows := x.Shape[0]
	rowBytes := x.Bytes() / rows
	src, dst := bytesOf(x), bytesOf(out)
	for i, r := range i32(idx) {
		if r < 0 || int(r) >= rows {
			return fmt.Errorf("row %d outside [0,%d)", r, rows)
		}
		copy(dst[i*rowBytes:(i+1)*rowBytes], src[int(r)*rowBytes:])
	}
	return nil
}

func takeAlong(y, x []float32, idx []int32, v, k int) error {
	for i, j := range idx {
		if j < 0 || int(j) >= v {
			return fmt.Errorf("index %d outside [0,%d)", j, v)
		}
		y[i] = x[(i/k)*v+int(j)]
	}
	return nil
}
