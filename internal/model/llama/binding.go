package llama

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Binding holds host weights wrapped for a backend, each tensor once.
type Binding struct {
	Backend graph.Backend
	bufs    map[*byte]graph.Buffer // by the first byte of a weight's data
}

// NewBinding returns an empty binding for be.
func NewBinding(be graph.Backend) *Binding {
	return &Binding{Backend: be, bufs: map[*byte]graph.Buffer{}}
}

// Add wraps weights for the backend without copying where it allows
// (mmapped weights on the CPU and on unified-memory GPUs), and hands owned
// ones (Weight.Owned) over to a backend that can take them.
func (b *Binding) Add(ws ...*Weight) error {
	for _, w := range ws {
		if w.Quantized() {
			if err := b.Add(&w.Quant.Scales, &w.Quant.Biases); err != nil {
				return err
			}
		}
		if _, ok := b.bufs[&w.Data[0]]; ok {
			continue
		}
		wrap := b.Backend.WrapHost
		if a, ok := b.Backend.(graph.Adopter); ok && w.Owned {
			wrap = a.AdoptHost
		}
		buf, err := wrap(w.Data)
		if err != nil {
			return fmt.Errorf("llama: binding %s: %w", w.Name, err)
		}
		b.bufs[&w.Data[0]] = buf
	}
	return nil
}

// Array returns w as a constant of graph g; w must have been added.
func (b *Binding) Array(g *graph.Graph, w *Weight) *graph.Array {
	if q := w.Quant; q != nil { // the f32 matrix it stands for; MatMul and Embed read it packed
		codes := g.Const(w.Name, b.bufs[&w.Data[0]], 0, graph.U32, w.Shape[0], w.Shape[1]*q.Bits/32)
		return graph.Quantized(codes, b.Array(g, &q.Scales), b.Array(g, &q.Biases), q.Bits, q.GroupSize)
	}
	if w.Blocks != 0 { // likewise, read as blocks
		blocks := g.Const(w.Name, b.bufs[&w.Data[0]], 0, graph.U8, w.Shape[0], len(w.Data)/w.Shape[0])
		return graph.Blocks(blocks, w.Blocks.String(), w.Shape[1])
	}
	return g.Const(w.Name, b.bufs[&w.Data[0]], 0, w.DType, w.Shape...)
}

// Close releases the backend's views of the weights.
func (b *Binding) Close() {
	for _, buf := range b.bufs {
		b.Backend.Free(buf)
	}
	b.bufs = map[*byte]graph.Buffer{}
}
