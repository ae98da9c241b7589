package llama

import (
	"fmt"
	"math"
	"math/bits"

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
	return g.Const(w.Name, b.bufs[&w.Data[0]], 0, w.DType, w.Shape...)
}

// Close releases the backend's views of the weights.
func (b *Binding) Close() {
	for _, buf := range b.bufs {
		b.Backend.Free(buf)
	}
	b.bufs = map[*byte]graph.Buffer{}
}

// Runner is a model bound to a backend.
type Runner struct {
	*Binding
	Model *Model
	// KVCache is the element type of the KV caches of new States: F32 (the
	// default when unset) or F16, which halves their memory and the bytes
	// attention reads, at a rounding of keys and values to halves.
	KVCache graph.DType
	invFreq []float32
}

// kvType is the KV caches' element type.
func (r *Runner) kvType() graph.DType {
	if r.KVCache == graph.F16 {
		return graph.F16
	}
	return graph.F32
}

// Bind wraps the model's weights for be.
func Bind(m *Model, be graph.Backend) (*Runner, error) {
	r := &Runner{Binding: NewBinding(be), Model: m, invFreq: m.Config.InvFreq()}
	if err := r.Add(m.weightsOf()...); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Runner) weight(g *graph.Graph, w *Weight) *graph.Array { return r.Array(g, w) }

// forwardGraph is one compiled forward pass over n new tokens producing
// logits and final-norm hidden states for nOut selected rows.
type forwardGraph struct {
	plan                          *graph.Plan
	tokens, pos, kvLen, end, rows *graph.Array
	logits, hidden                *graph.Array
}

// build writes the Llama forward pass as a graph.
func (r *Runner) build(s *State, n, nOut int) (*forwardGraph, error) {
	g := graph.New()
	f := &forwardGraph{
		tokens: g.Input("tokens", graph.I32, n),
		pos:    g.Input("positions", graph.I32, n),
		kvLen:  g.Input("kv_len", graph.I32, 1),
		end:    g.Input("tree_end", graph.I32, n),
		rows:   g.Input("out_rows", graph.I32, nOut),
	}
	f.logits, f.hidden = s.AddForward(g, f.tokens, f.pos, f.kvLen, f.end, f.rows)
	p, err := graph.Compile(r.Backend, f.logits, f.hidden)
	if err != nil {
		return nil, err
	}
	f.plan = p
	return f, nil
}

// AddForward adds the Llama forward pass over the new tokens [n] to g, with
// their positions [n], the cached length kvLen [1] and their tree interval
// ends [n] (see Batch), writing their keys and values into s's cache at
// kvLen; it returns the logits [nOut, vocab] and final-norm hidden states
// [nOut, dim] of the tokens rows [nOut] names. Forward runs it with every
// array an Input; a caller may compute tokens on the device instead (the
// greedy ReDrafter step, drafter.DeviceStep). PyTorch equivalents are in
// the comments; shapes are [rows, ...].
func (s *State) AddForward(g *graph.Graph, tokens, pos, kvLen, end, rows *graph.Array) (logits, hidden *graph.Array) {
	r := s.r
	c := &r.Model.Config
	m := r.Model
	n := tokens.Shape()[0]
	f := &forwardGraph{tokens: tokens, pos: pos, kvLen: kvLen, end: end, rows: rows}
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	x := graph.Embed(r.weight(g, &m.Embed), f.tokens) // x = embed_tokens(tokens)      [n, dim]
	for i := range m.Layers {
		l := &m.Layers[i]
		h := graph.RMSNorm(x, r.weight(g, &l.AttnNorm), c.NormEps) // h = input_layernorm(x)
		q := graph.MatMul(h, r.weight(g, &l.Q))                    // q = q_proj(h)            [n, heads*hd]
		k := graph.MatMul(h, r.weight(g, &l.K))                    // k = k_proj(h)            [n, kvHeads*hd]
		v := graph.MatMul(h, r.weight(g, &l.V))                    // v = v_proj(h)            [n, kvHeads*hd]
		if c.QKVBias {
			q = graph.Add(q, r.weight(g, &l.QBias))
			k = graph.Add(k, r.weight(g, &l.KBias))
			v = graph.Add(v, r.weight(g, &l.VBias))
		}
		q = graph.RoPE(graph.Reshape(q, n, c.Heads, c.HeadDim), f.pos, r.invFreq, c.RopeNeoX)
		k = graph.RoPE(graph.Reshape(k, n, c.KVHeads, c.HeadDim), f.pos, r.invFreq, c.RopeNeoX)
		v = graph.Reshape(v, n, c.KVHeads, c.HeadDim)
		kc := graph.KVWrite(s.kv(g, i, 0), k, f.kvLen) // cache.update(k, v)
		vc := graph.KVWrite(s.kv(g, i, 1), v, f.kvLen)
		a := graph.Attention(q, kc, vc, f.kvLen, f.end, scale) // sdpa(q, k, v, tree mask)   [n, heads, hd]
		a = graph.Reshape(a, n, c.Heads*c.HeadDim)
		x = graph.Add(x, graph.MatMul(a, r.weight(g, &l.O)))     // x = x + o_proj(a)
		h = graph.RMSNorm(x, r.weight(g, &l.FFNNorm), c.NormEps) // h = post_attention_layernorm(x)
		gate := graph.MatMul(h, r.weight(g, &l.Gate))
		up := graph.MatMul(h, r.weight(g, &l.Up))
		x = graph.Add(x, graph.MatMul(graph.SwiGLU(gate, up), r.weight(g, &l.Down))) // x = x + down(silu(gate(h)) * up(h))
	}
	x = graph.GatherRows(x, f.rows)                              // only the rows asked for
	f.hidden = graph.RMSNorm(x, r.weight(g, &m.Norm), c.NormEps) // hidden = norm(x)   [nOut, dim]
	f.logits = graph.MatMul(f.hidden, r.weight(g, &m.Output))    // logits = lm_head(hidden) [nOut, vocab]
	return f.logits, f.hidden
}

// State is one sequence's KV cache on the backend, with the plans compiled
// against it (one per batch shape, reused every step).
type State struct {
	r      *Runner
	cache  []graph.Buffer // per layer: K then V, each [cap, kvHeads, headDim] f32
	cap    int
	len    int
	plans  map[[2]int]*forwardGraph
	kvArrs map[*graph.Graph][]*graph.Array
	// compaction plans by kept count
	compact map[int]*compactGraph
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

// kv returns the graph array of layer l's K (which=0) or V (which=1) cache.
func (s *State) kv(g *graph.Graph, l, which int) *graph.Array {
	arrs := s.kvArrs[g]
	if arrs == nil {
		arrs = make([]*graph.Array, len(s.cache))
		s.kvArrs[g] = arrs
	}
	i := 2*l + which
	if arrs[i] == nil {
		c := &s.r.Model.Config
		arrs[i] = g.Var(fmt.Sprintf("cache.%d.%c", l, "kv"[which]), s.cache[i], 0, s.r.kvType(), c.KVHeads, s.cap, c.HeadDim)
	}
	return arrs[i]
}

// Close frees the cache and the plans.
func (s *State) Close() {
	for _, f := range s.plans {
		f.plan.Free()
	}
	for _, c := range s.compact {
		c.plan.Free()
	}
	for _, b := range s.cache {
		s.r.Backend.Free(b)
	}
	s.plans, s.compact, s.cache = nil, nil, nil
}

// Len is the number of tokens whose keys and values are cached.
func (s *State) Len() int { return s.len }

// Cap is the cache capacity in tokens.
func (s *State) Cap() int { return s.cap }

// Batch is the new tokens of one forward pass, laid out as a tree in DFS
// pre-order (a chain for prefill and decode).
type Batch struct {
	Tokens []int32
	Depth  []int32 // depth of each token in the tree; position = Len() + depth
	End    []int32 // DFS interval end of each token (see graph.AttentionOp)
	Rows   []int32 // which tokens' logits and hidden states to return
}

// Chain returns the batch of a plain causal sequence, asking for the
// outputs of the last token only, or of every token when all is true.
func Chain(tokens []int32, all bool) Batch {
	n := len(tokens)
	b := Batch{Tokens: tokens, Depth: make([]int32, n), End: make([]int32, n)}
	for i := range n {
		b.Depth[i] = int32(i)
		b.End[i] = int32(n - 1)
	}
	if all {
		b.Rows = b.Depth
	} else {
		b.Rows = []int32{int32(n - 1)}
	}
	return b
}

// Forward runs the model over b, writing their keys and values at
// Len()..Len()+n-1 without advancing Len, and fills logits [rows, vocab] and
// hidden [rows, dim] (either may be nil). Call Advance or Keep afterwards.
func (s *State) Forward(b Batch, logits, hidden []float32) error {
	n, nOut := len(b.Tokens), len(b.Rows)
	if n == 0 || nOut == 0 {
		return fmt.Errorf("llama: empty batch")
	}
	if s.len+n > s.cap {
		return fmt.Errorf("llama: %d cached + %d new tokens exceed the context of %d", s.len, n, s.cap)
	}
	key := [2]int{n, nOut}
	f := s.plans[key]
	if f == nil {
		var err error
		if f, err = s.r.build(s, n, nOut); err != nil {
			return err
		}
		s.plans[key] = f
	}
	pos := make([]int32, n)
	for i, d := range b.Depth {
		pos[i] = int32(s.len) + d
	}
	p := f.plan
	for _, w := range []struct {
		a *graph.Array
		v []int32
	}{{f.tokens, b.Tokens}, {f.pos, pos}, {f.kvLen, []int32{int32(s.len)}}, {f.end, b.End}, {f.rows, b.Rows}} {
		if err := p.Write(w.a, w.v); err != nil {
			return err
		}
	}
	if err := p.Run(); err != nil {
		return fmt.Errorf("llama: forward: %w", err)
	}
	if logits != nil {
		if err := p.Read(f.logits, logits); err != nil {
			return err
		}
		if err := s.checkFinite("logits", b, pos, logits, s.r.Model.Config.Vocab); err != nil {
			return err
		}
	}
	if hidden != nil {
		if err := p.Read(f.hidden, hidden); err != nil {
			return err
		}
		if err := s.checkFinite("hidden state", b, pos, hidden, s.r.Model.Config.Dim); err != nil {
			return err
		}
	}
	return nil
}

// checkFinite returns a *NonFiniteError for the first NaN or ±Inf in the
// output rows of b (out is [len(b.Rows), width]). Every value a token is
// chosen from passes here once, where it is read back: one comparison per
// float, next to a forward pass that did a multiply-add per weight.
func (s *State) checkFinite(what string, b Batch, pos []int32, out []float32, width int) error {
	for r, tok := range b.Rows {
		row := out[r*width : (r+1)*width]
		for i, x := range row {
			if x-x != 0 { // NaN and ±Inf alone give NaN
				return &NonFiniteError{What: what, Pos: int(pos[tok]), Index: i, Value: x}
			}
		}
	}
	return nil
}

// Advance keeps the next n cached entries (a chain that was fully accepted).
func (s *State) Advance(n int) {
	if s.len+n > s.cap {
		panic("llama: Advance past the cache")
	}
	s.len += n
}

// Trim forgets every cached entry from position n on.
func (s *State) Trim(n int) {
	if n < 0 || n > s.len {
		panic("llama: Trim outside the cache")
	}
	s.len = n
}

type compactGraph struct {
	plan       *graph.Plan
	kvLen, idx *graph.Array
}

// Keep keeps the entries of the last forward pass at the given tree
// indices (strictly increasing, idx[i] >= i), moving them to
// Len()..Len()+len(idx)-1, and advances Len by len(idx).
func (s *State) Keep(idx []int32) error {
	n := len(idx)
	contiguous := true
	for i, j := range idx {
		contiguous = contiguous && int(j) == i
	}
	if !contiguous {
		cg := s.compact[n]
		if cg == nil {
			g := graph.New()
			cg = &compactGraph{kvLen: g.Input("kv_len", graph.I32, 1), idx: g.Input("keep", graph.I32, n)}
			p, err := graph.Compile(s.r.Backend, s.AddKeep(g, cg.kvLen, cg.idx)...)
			if err != nil {
				return err
			}
			cg.plan = p
			s.compact[n] = cg
		}
		if err := cg.plan.Write(cg.kvLen, []int32{int32(s.len)}); err != nil {
			return err
		}
		if err := cg.plan.Write(cg.idx, idx); err != nil {
			return err
		}
		if err := cg.plan.Run(); err != nil {
			return fmt.Errorf("llama: compacting the cache: %w", err)
		}
	}
	s.Advance(n)
	return nil
}

// NonFiniteError reports a forward pass whose logits (or hidden states)
// hold NaN or ±Inf: the model's weights, or its arithmetic, are broken, and
// no token can be chosen from them.
type NonFiniteError struct {
	What  string  // "logits" or "hidden state"
	Pos   int     // position in the sequence (from 0) of the token whose output it is
	Index int     // the first bad entry of that row (a vocabulary id for logits)
	Value float32 // NaN, +Inf or -Inf
}

func (e *NonFiniteError) Error() string {
	v := "NaN"
	if math.IsInf(float64(e.Value), 1) {
		v = "+Inf"
	} else if math.IsInf(float64(e.Value), -1) {
		v = "-Inf"
	}
	return fmt.Sprintf("llama: the model produced %s %s at position %d (entry %d); its weights may hold NaN or Inf", v, e.What, e.Pos, e.Index)
}
