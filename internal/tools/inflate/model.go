package inflate

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Options control how the inflated weights are stored and drawn.
type Options struct {
	// DType stores the matrices: graph.F16 or graph.F32 (the default).
	// Norm weights, biases and rope factors are always F32, as llama.cpp
	// expects.
	DType graph.DType
	// Seed draws the weights of the added layers.
	Seed uint64
	// Progress, if set, is called after each tensor is built (done of
	// total) and once before the file is written (done == total).
	Progress func(done, total int, name string)
}

func (o Options) dtype() (graph.DType, error) {
	switch o.DType {
	case 0:
		return graph.F32, nil
	case graph.F32, graph.F16:
		return o.DType, nil
	}
	return 0, fmt.Errorf("inflate: cannot store weights as %v (f16 or f32)", o.DType)
}

// Model inflates the GGUF model at in to shape s and writes it to out (via
// a temporary file, renamed when complete). It returns the plan, which also
// inflates the model's draft heads.
func Model(in, out string, s Shape, opt Options) (*Plan, error) {
	return ModelContext(context.Background(), in, out, s, opt)
}

// ModelContext is Model, stopped when ctx is done: it checks ctx between
// tensors and while writing, removes its temporary file, and returns
// ctx's error.
func ModelContext(ctx context.Context, in, out string, s Shape, opt Options) (*Plan, error) {
	dt, err := opt.dtype()
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(in); err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	} else if st.IsDir() {
		return nil, fmt.Errorf("inflate: %s: the input must be a .gguf file (HF checkpoints rotate NeoX halves; convert to GGUF first)", in)
	}
	g, err := formats.OpenGGUF(in)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	ck, err := llama.Open(in)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	p, err := NewPlan(ck.Model.Config, s)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, in)
	}
	tensors, err := p.tensors(ctx, ck.Model, dt, opt.Seed, opt.Progress)
	if err != nil {
		return nil, err
	}
	kv := p.Metadata(g.KVs(), dt)
	err = writeFile(out, func(f *os.File) error { return formats.WriteGGUF(ctxWriter{ctx, f}, kv, tensors, 0) })
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ctxWriter fails every write once ctx is done, so that writing a large
// file stops within one tensor of a cancellation.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// writeFile writes path through a temporary file in the same directory.
func writeFile(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("inflate: %w", err)
	}
	err = write(f)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("inflate: %s: %w", path, err)
	}
	return nil
}

// Metadata rewrites a GGUF model's metadata for the inflated shape: sizes,
// the rescaled RMSNorm epsilon, the file type, and a note of the original
// shape and where its layers went.
func (p *Plan) Metadata(kvs []formats.KV, dt graph.DType) []formats.KV {
	arch := p.From.Arch
	t := p.To
	ints := map[string]int{
		arch + ".embedding_length":        t.Dim,
		arch + ".feed_forward_length":     t.FFN,
		arch + ".block_count":             t.Layers,
		arch + ".attention.head_count":    t.Heads,
		arch + ".attention.head_count_kv": t.KVHeads,
		arch + ".rope.dimension_count":    t.RopeDims,
	}
	optional := map[string]int{ // rewritten only if present
		arch + ".attention.key_length":   t.HeadDim,
		arch + ".attention.value_length": t.HeadDim,
	}
	ftype := uint32(0) // LLAMA_FTYPE_ALL_F32
	if dt == graph.F16 {
		ftype = 1 // LLAMA_FTYPE_MOSTLY_F16
	}
	out := make([]formats.KV, 0, len(kvs)+8)
	seen := map[string]bool{}
	for _, e := range kvs {
		k := e.Key
		seen[k] = true
		if v, ok := ints[k]; ok {
			e.Value = sameInt(e.Value, v)
		} else if v, ok := optional[k]; ok {
			e.Value = sameInt(e.Value, v)
		}
		switch k {
		case arch + ".attention.layer_norm_rms_epsilon":
			e.Value = t.NormEps
		case "general.file_type":
			e.Value = sameInt(e.Value, int(ftype))
		case "general.name":
			if s, ok := e.Value.(string); ok {
				e.Value = s + " (inflated)"
			}
		}
		if strings.HasPrefix(k, "redrafter.inflate.") {
			continue // from an earlier inflation; rewritten below
		}
		out = append(out, e)
	}
	for _, k := range []string{arch + ".embedding_length", arch + ".feed_forward_length", arch + ".block_count",
		arch + ".attention.head_count", arch + ".attention.head_count_kv", arch + ".rope.dimension_count"} {
		if !seen[k] {
			out = append(out, formats.KV{Key: k, Value: uint32(ints[k])})
		}
	}
	if !seen[arch+".attention.layer_norm_rms_epsilon"] {
		out = append(out, formats.KV{Key: arch + ".attention.layer_norm_rms_epsilon", Value: t.NormEps})
	}
	if !seen["general.file_type"] {
		out = append(out, formats.KV{Key: "general.file_type", Value: ftype})
	}
	at := make([]int32, len(p.LayerAt))
	for i, l := range p.LayerAt {
		at[i] = int32(l)
	}
	out = append(out,
		formats.KV{Key: "redrafter.inflate.source_shape", Value: ShapeOf(p.From).String()},
		formats.KV{Key: "redrafter.inflate.source_layers", Value: at})
	return out
}

// sameInt returns v with the integer type of old (uint32 if old is not an
// integer).
func sameInt(old any, v int) any {
	switch old.(type) {
	case uint64:
		return uint64(v)
	case int64:
		return int64(v)
	case int32:
		return int32(v)
	case uint16:
		return uint16(v)
	}
	return uint32(v)
}

// job fills one output tensor: dst is zeroed, of the tensor's size, in f32.
type job struct {
	name   string
	shape  []int
	fill   func(dst []float32) // nil: all zeros
	vector bool                // stored as F32 whatever the dtype
}

// Tensors builds the inflated model's tensors in GGUF names. The added
// layers' random weights come from seed.
func (p *Plan) Tensors(m *llama.Model, dt graph.DType, seed uint64) ([]formats.Tensor, error) {
	return p.tensors(context.Background(), m, dt, seed, nil)
}

func (p *Plan) tensors(ctx context.Context, m *llama.Model, dt graph.DType, seed uint64,
	progress func(done, total int, name string)) ([]formats.Tensor, error) {
	if _, err := (Options{DType: dt}).dtype(); err != nil {
		return nil, err
	}
	f, t := p.From, p.To
	var jobs []job
	copyVec := func(name string, w llama.Weight, n int, idx func(int) int, scale float32) {
		jobs = append(jobs, job{name: name, shape: []int{n}, vector: true, fill: func(dst []float32) {
			for i, v := range values(w) {
				dst[idx(i)] = v * scale
			}
		}})
	}
	copyMat := func(name string, w llama.Weight, rows, cols int, rowMap, colMap func(int) int, scale float32) {
		jobs = append(jobs, job{name: name, shape: []int{rows, cols}, fill: func(dst []float32) {
			src := values(w)
			sc := w.Shape[1]
			for r := range w.Shape[0] {
				row := dst[rowMap(r)*cols:]
				for c, v := range src[r*sc : (r+1)*sc] {
					row[colMap(c)] = v * scale
				}
			}
		}})
	}
	copyMat(ggufName(m.Embed), m.Embed, f.Vocab, t.Dim, identity, identity, 1)
	copyVec(ggufName(m.Norm), m.Norm, t.Dim, identity, p.NormScale())
	if !f.TiedOutput {
		copyMat(ggufName(m.Output), m.Output, f.Vocab, t.Dim, identity, identity, 1)
	}
	if ff := t.RopeScale.FreqFactors; len(ff) > 0 {
		jobs = append(jobs, job{name: "rope_freqs.weight", shape: []int{len(ff)}, vector: true,
			fill: func(dst []float32) { copy(dst, ff) }})
	}
	q, kv := t.Heads*t.HeadDim, t.KVHeads*t.HeadDim
	orig := make(map[int]int, len(p.LayerAt)) // inflated index → original
	for i, at := range p.LayerAt {
		orig[at] = i
	}
	for at := range t.Layers {
		prefix := fmt.Sprintf("blk.%d.", at)
		if i, ok := orig[at]; ok {
			l := m.Layers[i]
			name := func(w llama.Weight) string { return prefix + layerSuffix(w) }
			copyVec(name(l.AttnNorm), l.AttnNorm, t.Dim, identity, p.NormScale())
			copyMat(name(l.Q), l.Q, q, t.Dim, p.QRow, identity, p.QueryScale())
			copyMat(name(l.K), l.K, kv, t.Dim, p.KVRow, identity, 1)
			copyMat(name(l.V), l.V, kv, t.Dim, p.KVRow, identity, 1)
			copyMat(name(l.O), l.O, t.Dim, q, identity, p.QRow, 1)
			if f.QKVBias {
				copyVec(name(l.QBias), l.QBias, q, p.QRow, p.QueryScale())
				copyVec(name(l.KBias), l.KBias, kv, p.KVRow, 1)
				copyVec(name(l.VBias), l.VBias, kv, p.KVRow, 1)
			}
			copyVec(name(l.FFNNorm), l.FFNNorm, t.Dim, identity, p.NormScale())
			copyMat(name(l.Gate), l.Gate, t.FFN, t.Dim, identity, identity, 1)
			copyMat(name(l.Up), l.Up, t.FFN, t.Dim, identity, identity, 1)
			copyMat(name(l.Down), l.Down, t.Dim, t.FFN, identity, identity, 1)
			continue
		}
		// An identity layer: real work, zero output.
		rnd := func(suffix string, rows, cols int) {
			s := rand.NewPCG(seed, uint64(at)<<8|uint64(len(jobs)))
			jobs = append(jobs, job{name: prefix + suffix, shape: []int{rows, cols}, fill: func(dst []float32) {
				r := rand.New(s)
				bound := float32(math.Sqrt(3 / float64(cols))) // unit variance out
				for i := range dst {
					dst[i] = (2*r.Float32() - 1) * bound
				}
			}})
		}
		ones := func(suffix string) {
			jobs = append(jobs, job{name: prefix + suffix, shape: []int{t.Dim}, vector: true, fill: func(dst []float32) {
				for i := range dst {
					dst[i] = 1
				}
			}})
		}
		zeros := func(suffix string, shape ...int) {
			jobs = append(jobs, job{name: prefix + suffix, shape: shape, vector: len(shape) == 1})
		}
		ones("attn_norm.weight")
		rnd("attn_q.weight", q, t.Dim)
		rnd("attn_k.weight", kv, t.Dim)
		rnd("attn_v.weight", kv, t.Dim)
		zeros("attn_output.weight", t.Dim, q)
		if f.QKVBias {
			zeros("attn_q.bias", q)
			zeros("attn_k.bias", kv)
			zeros("attn_v.bias", kv)
		}
		ones("ffn_norm.weight")
		rnd("ffn_gate.weight", t.FFN, t.Dim)
		rnd("ffn_up.weight", t.FFN, t.Dim)
		zeros("ffn_down.weight", t.Dim, t.FFN)
	}
	return runJobs(ctx, jobs, dt, progress)
}

// runJobs fills the tensors on every core, and stops handing out jobs
// when ctx is done.
func runJobs(ctx context.Context, jobs []job, dt graph.DType, progress func(done, total int, name string)) ([]formats.Tensor, error) {
	out := make([]formats.Tensor, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	report := func(name string) {
		if progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		done++
		progress(done, len(jobs), name)
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				j := jobs[i]
				n := graph.Shape(j.shape).Numel()
				if j.fill == nil {
					out[i] = zeros(j.name, j.shape, n, dt, j.vector)
				} else {
					buf := make([]float32, n)
					j.fill(buf)
					out[i] = encode(j.name, j.shape, buf, dt, j.vector)
				}
				report(j.name)
			}
		})
	}
	var err error
	for i := range jobs {
		if err = ctx.Err(); err != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	return out, nil
}

func zeros(name string, shape []int, n int, dt graph.DType, vector bool) formats.Tensor {
	if dt == graph.F32 || vector {
		return formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: make([]byte, 4*n)}
	}
	return formats.Tensor{Name: name, DType: formats.F16, Shape: shape, Data: make([]byte, 2*n)}
}

func encode(name string, shape []int, v []float32, dt graph.DType, vector bool) formats.Tensor {
	if dt == graph.F32 || vector {
		return formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: graph.AsBytes(v)}
	}
	return formats.Tensor{Name: name, DType: formats.F16, Shape: shape, Data: graph.AsBytes(quant.F32sToF16(v))}
}

// values returns a weight's elements as float32 (a copy).
func values(w llama.Weight) []float32 {
	w = llama.ToF32(w)
	out := make([]float32, len(w.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(w.Data[4*i:]))
	}
	return out
}

// ggufName is a model-level weight's GGUF name.
func ggufName(w llama.Weight) string { return w.Name }

// layerSuffix strips "blk.N." from a layer weight's GGUF name.
func layerSuffix(w llama.Weight) string {
	parts := strings.SplitN(w.Name, ".", 3)
	if len(parts) != 3 || parts[0] != "blk" {
		panic(fmt.Sprintf("inflate: layer weight %q has no blk.N. prefix", w.Name))
	}
	return parts[2]
}
