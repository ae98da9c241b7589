package llama

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Runner is a model bound to a backend.
type Runner struct {
	*Binding
	// Model is the model as the backend runs it: the bound model, or a
	// copy whose block weights were converted for a backend without
	// kernels for their format (Model.ForBackend).
	Model *Model
	// KVCache is the element type of the KV caches of new States: F32 (the
	// default when unset) or F16, which halves their memory and the bytes
	// attention reads, at a rounding of keys and values to halves.
	KVCache graph.DType
	invFreq []float32
	// localInvFreq is the sliding layers' RoPE table when they have a base
	// of their own (Config.RopeLocalTheta), else invFreq.
	localInvFreq []float32
	// embedScale is Config.EmbedScale repeated over the hidden size, the
	// Mul that scales Gemma's embeddings; absent for other models.
	embedScale Weight
	// ropeGain and ropeGainQKV multiply q and k (one head's worth), or the
	// fused q·k·v rows, by longrope's attention factor on their rotated
	// dimensions before RoPE (rope.go); absent when the factor is 1.
	ropeGain, ropeGainQKV Weight
	scale                 float32 // attention's (Config.attentionScale)
	// fused holds each layer's joined weights when the backend runs fused
	// layers (fusesLayers); nil builds the unfused graph.
	fused []fusedLayer
}

// kvType is the KV caches' element type.
func (r *Runner) kvType() graph.DType {
	if r.KVCache == graph.F16 {
		return graph.F16
	}
	return graph.F32
}

// Bind wraps the model's weights for be, with the layers fused where be
// runs fused layers (a GPU backend; see graph.FusedLayers).
func Bind(m *Model, be graph.Backend) (*Runner, error) { return BindFused(m, be, fusesLayers(be)) }

// BindFused is Bind with the choice of fused layers made by the caller (a
// test comparing both graphs on one backend). Fused layers need Q, K and V
// (and gate and up) joined into one matrix each: that copy is made here,
// and the backend is given the joined matrices instead of the parts.
func BindFused(m *Model, be graph.Backend, fused bool) (*Runner, error) {
	m, err := m.ForBackend(be)
	if err != nil {
		return nil, err
	}
	r := &Runner{Binding: NewBinding(be), Model: m, invFreq: m.Config.InvFreq(), localInvFreq: m.Config.LocalInvFreq(),
		scale: m.Config.attentionScale()}
	ws := m.weightsOf()
	if s := m.Config.EmbedScale; s > 0 {
		v := make([]float32, m.Config.Dim)
		for i := range v {
			v[i] = s
		}
		r.embedScale = Weight{Name: "embed_scale", DType: graph.F32, Shape: graph.Shape{m.Config.Dim}, Data: graph.AsBytes(v)}
		ws = append(ws, &r.embedScale)
	}
	c := &m.Config
	r.ropeGain = c.ropeGain("rope_gain", 1, 0)
	if r.ropeGain.Present() {
		r.ropeGainQKV = c.ropeGain("rope_gain_qkv", c.Heads+c.KVHeads, c.KVHeads)
		ws = append(ws, &r.ropeGain, &r.ropeGainQKV)
	}
	if fused {
		r.fused = m.joinLayers(be)
		joined := map[*Weight]bool{}
		for i := range m.Layers {
			l, f := &m.Layers[i], &r.fused[i]
			if f.QKV.Present() {
				joined[&l.Q], joined[&l.K], joined[&l.V] = true, true, true
				joined[&l.QBias], joined[&l.KBias], joined[&l.VBias] = true, true, true
				ws = append(ws, &f.QKV)
				if f.QKVBias.Present() {
					ws = append(ws, &f.QKVBias)
				}
			}
			if f.GateUp.Present() {
				joined[&l.Gate], joined[&l.Up] = true, true
				ws = append(ws, &f.GateUp)
			}
		}
		ws = slices.DeleteFunc(ws, func(w *Weight) bool { return joined[w] })
	}
	if err := r.Add(ws...); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// UseContext picks the RoPE frequencies for runs of at most n tokens,
// the context the engine runs with; Bind picks them for the model's whole
// context. Only longrope depends on it (its short factors up to the
// pretrained context, the long ones beyond: see rope.go). Call it before
// any State is made: their plans keep the frequencies they were built
// with.
func (r *Runner) UseContext(n int) { r.invFreq = r.Model.Config.InvFreqFor(n) }

// Fused reports whether the runner builds fused layers.
func (r *Runner) Fused() bool { return r.fused != nil }

func (r *Runner) weight(g *graph.Graph, w *Weight) *graph.Array { return r.Array(g, w) }

// optWeight is weight, or nil for an absent one.
func (r *Runner) optWeight(g *graph.Graph, w *Weight) *graph.Array {
	if !w.Present() {
		return nil
	}
	return r.Array(g, w)
}

// KVBytes is the size of a KV cache of capacity tokens, all layers, keys
// and values; an error when it does not fit in an int64.
func (r *Runner) KVBytes(capacity int) (int64, error) {
	c := &r.Model.Config
	total := uint64(r.kvType().Size())
	for _, n := range []int{2, c.Layers, c.KVHeads, c.HeadDim, capacity} {
		hi, lo := bits.Mul64(total, uint64(max(n, 0)))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("llama: a KV cache of %d tokens is larger than any memory", capacity)
		}
		total = lo
	}
	return int64(total), nil
}

// MemoryLimit is what the backend says it can hold (graph.MemoryLimiter),
// 0 when it does not say.
func (r *Runner) MemoryLimit() int64 {
	if m, ok := r.Backend.(graph.MemoryLimiter); ok {
		return m.MemoryLimit()
	}
	return 0
}

// formatBytes writes n as GiB or MiB with one decimal.
func formatBytes(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// NewState allocates a KV cache for up to capacity tokens.
func (r *Runner) NewState(capacity int) (*State, error) {
	c := &r.Model.Config
	if capacity <= 0 || capacity > c.Context {
		return nil, fmt.Errorf("llama: cache capacity %d outside the model's context of %d", capacity, c.Context)
	}
	total, err := r.KVBytes(capacity)
	if err != nil {
		return nil, err
	}
	if limit := r.MemoryLimit(); limit > 0 && total > limit {
		return nil, fmt.Errorf("llama: a KV cache of %d tokens needs %s, more than the %s the %s backend can hold: choose a smaller context",
			capacity, formatBytes(total), formatBytes(limit), r.Backend.Name())
	}
	s := &State{r: r, cap: capacity, plans: map[[2]int]*forwardGraph{}, kvArrs: map[*graph.Graph][]*graph.Array{},
		compact: map[int]*compactGraph{}}
	size := int(total / int64(2*c.Layers))
	for range 2 * c.Layers {
		b, err := r.Backend.Alloc(size)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("llama: allocating the KV cache: %w", err)
		}
		s.cache = append(s.cache, b)
	}
	return s, nil
}
