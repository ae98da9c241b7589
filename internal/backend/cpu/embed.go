package cpu

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// EmbedOp; mirrors internal/backend/metal/embed.go.

// embed gathers table rows; ids out of range are an error, not a crash.
func (b *Backend) embed(out, table, ids graph.Operand) error {
	v, d := table.Shape[0], table.Shape[1]
	y := f32(out)
	for i, id := range i32(ids) {
		if id < 0 || int(id) >= v {
			return fmt.Errorf("token id %d outside the vocabulary of %d", id, v)
		}
		row := y[i*d : (i+1)*d]
		switch table.DType {
		case graph.F32:
			copy(row, f32(table)[int(id)*d:])
		case graph.F16:
			for j, h := range u16(table)[int(id)*d : int(id+1)*d] {
				row[j] = quant.F16ToF32(h)
			}
		case graph.BF16:
			for j, h := range u16(table)[int(id)*d : int(id+1)*d] {
				row[j] = quant.BF16ToF32(h)
			}
		}
	}
	return nil
}
