package inflate

import (
	"context"
	"fmt"
	"os"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// Deflate is DeflateContext without a context.
func Deflate(big, small, out string) error {
	return DeflateContext(context.Background(), big, small, out)
}

// DeflateContext undoes Model: it writes to out (a .gguf file, f32) the
// model of small's shape (the .gguf file Model inflated) whose weights are
// big's, read back at the coordinates Model put small's weights, with the
// norm and query scaling undone. big may be any model llama.Open reads
// that Model made from small and that was converted or quantized since
// (a 4-bit HF directory from `redrafter quantize`): Model's padding is
// exact zeros, which stay zero through quantization (a group of zeros has
// scale and bias 0) and contribute nothing, so the small model computes
// what big computes on the real coordinates, up to the order of sums.
//
// That is what makes a draft head for a quantized inflated model cheap to
// train: the deflated model distils its continuations at the small
// model's speed, and the head trained on them inflates back (Drafter).
func DeflateContext(ctx context.Context, big, small, out string) error {
	g, err := formats.OpenGGUF(small)
	if err != nil {
		return err
	}
	defer g.Close()
	sc, err := llama.Open(small)
	if err != nil {
		return err
	}
	defer sc.Close()
	bc, err := llama.Open(big)
	if err != nil {
		return err
	}
	defer bc.Close()
	s, b := sc.Model, bc.Model
	p, err := NewPlan(s.Config, ShapeOf(b.Config))
	if err != nil {
		return fmt.Errorf("deflate: %s is not an inflation of %s: %w", big, small, err)
	}
	if t := p.To; t.HeadDim != b.Config.HeadDim || t.Vocab != b.Config.Vocab || len(b.Layers) != t.Layers {
		return fmt.Errorf("deflate: %s (head dim %d, vocab %d, %d layers) is not an inflation of %s (want %d, %d, %d)",
			big, b.Config.HeadDim, b.Config.Vocab, len(b.Layers), small, t.HeadDim, t.Vocab, t.Layers)
	}
	// Query and key rows: Model maps them in small's rotary layout; an HF
	// checkpoint of the inflated GGUF (convert) has them in NeoX order
	// (GGUF row h·d + 2j + i is HF row h·d + i·d/2 + j).
	rotary := func(r int) int { return r }
	switch {
	case s.Config.RopeNeoX == b.Config.RopeNeoX:
	case !s.Config.RopeNeoX && b.Config.RopeNeoX:
		hd := b.Config.HeadDim
		rotary = func(r int) int {
			h, x := r/hd, r%hd
			return h*hd + (x%2)*hd/2 + x/2
		}
	default:
		return fmt.Errorf("deflate: %s pairs rotary dimensions as NeoX halves and %s as adjacent pairs: deflate from the GGUF model", small, big)
	}
	qRow := func(r int) int { return rotary(p.QRow(r)) }
	kRow := func(r int) int { return rotary(p.KVRow(r)) }

	var jobs []job
	vec := func(dst, src llama.Weight, idx func(int) int, scale float32) {
		jobs = append(jobs, job{name: dst.Name, shape: []int{dst.Shape[0]}, vector: true, fill: func(out []float32) {
			v := values(src)
			for i := range out {
				out[i] = v[idx(i)] / scale
			}
		}})
	}
	mat := func(dst, src llama.Weight, rowMap, colMap func(int) int, scale float32) {
		rows, cols := dst.Shape[0], dst.Shape[1]
		jobs = append(jobs, job{name: dst.Name, shape: []int{rows, cols}, fill: func(out []float32) {
			v, bc := values(src), src.Shape[1]
			for r := range rows {
				row := v[rowMap(r)*bc:]
				for c := range cols {
					out[r*cols+c] = row[colMap(c)] / scale
				}
			}
		}})
	}
	mat(s.Embed, b.Embed, identity, identity, 1)
	vec(s.Norm, b.Norm, identity, p.NormScale())
	if !s.Config.TiedOutput {
		mat(s.Output, b.Output, identity, identity, 1)
	}
	for i, at := range p.LayerAt {
		sl, bl := s.Layers[i], b.Layers[at]
		vec(sl.AttnNorm, bl.AttnNorm, identity, p.NormScale())
		mat(sl.Q, bl.Q, qRow, identity, p.QueryScale())
		mat(sl.K, bl.K, kRow, identity, 1)
		mat(sl.V, bl.V, p.KVRow, identity, 1)
		mat(sl.O, bl.O, identity, p.QRow, 1)
		if s.Config.QKVBias {
			vec(sl.QBias, bl.QBias, qRow, p.QueryScale())
			vec(sl.KBias, bl.KBias, kRow, 1)
			vec(sl.VBias, bl.VBias, p.KVRow, 1)
		}
		vec(sl.FFNNorm, bl.FFNNorm, identity, p.NormScale())
		mat(sl.Gate, bl.Gate, identity, identity, 1)
		mat(sl.Up, bl.Up, identity, identity, 1)
		mat(sl.Down, bl.Down, identity, identity, 1)
	}
	tensors, err := runJobs(ctx, jobs, graph.F32, nil)
	if err != nil {
		return err
	}
	// Every tensor of the small file must have been rebuilt.
	names := map[string]bool{}
	for _, t := range tensors {
		names[t.Name] = true
	}
	for _, t := range g.Tensors {
		if !names[t.Name] {
			return fmt.Errorf("deflate: %s: tensor %s is not a weight deflate knows", small, t.Name)
		}
	}
	return writeFile(out, func(f *os.File) error { return formats.WriteGGUF(ctxWriter{ctx, f}, g.KVs(), tensors, 0) })
}
