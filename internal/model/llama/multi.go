package llama

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Request is one sequence's part of a joint forward pass: its State, the
// new tokens (as for State.Forward) and where its outputs go. Batcher.Forward
// sets Err.
type Request struct {
	State          *State
	Batch          Batch
	Logits, Hidden []float32 // [len(Rows), vocab] and [len(Rows), dim]; either may be nil
	Err            error
}

// InvariantRower is a Backend whose per-row results stay independent of the
// other rows of an op only up to a number of rows (Metal: MatMul changes
// kernel, and so the order of its sums, above Policy.MatvecMaxRows). A
// backend that does not implement it is batch-invariant for any rows (the
// CPU).
type InvariantRower interface {
	InvariantRows() int
}

// Batcher runs the forward passes of several States as one graph: the new
// tokens of every sequence are the rows of one pass, so each weight matmul
// runs once over all of them (weights are read once per pass instead of
// once per sequence), while each sequence writes its keys and values into
// its own cache and attends over its own cache and tree (a forest over
// several KV caches). Every row's logits and hidden state have the bits
// its own State.Forward would give.
//
// Plans are compiled per (states, their token and output counts), in the
// order given, and kept in a small LRU. A Batcher is not safe for
// concurrent use, and no State may take part in a joint pass while it runs
// anything of its own.
type Batcher struct {
	r     *Runner
	plans map[string]*jointGraph
	lru   []string // keys, least recently used first
	stats BatcherStats
}

// BatcherStats count a Batcher's work.
type BatcherStats struct {
	Passes   int // forward passes run
	Rows     int // new tokens over all passes
	Requests int // requests served (a pass serves one or more)
	Compiles int // plans compiled (the rest were found in the cache)
	Cached   int // plans held now
}

// maxJointPlans bounds the plans a Batcher keeps; the least recently used
// is freed beyond it.
const maxJointPlans = 48

// NewBatcher returns a Batcher for r's States.
func (r *Runner) NewBatcher() *Batcher {
	return &Batcher{r: r, plans: map[string]*jointGraph{}}
}

// Stats returns the counts so far.
func (b *Batcher) Stats() BatcherStats {
	st := b.stats
	st.Cached = len(b.plans)
	return st
}

// jointGraph is one compiled pass over the requests of a key.
type jointGraph struct {
	plan                          *graph.Plan
	states                        []*State
	starts                        []int // first row of each State's tokens, then n
	tokens, pos, kvLen, end, rows *graph.Array
	logits, hidden                *graph.Array
}

// Forward runs every request, in as few passes as keep each row's result
// independent of the others on this backend (one on the CPU), and sets
// each request's Err: a request that cannot run (empty, past its cache, a
// State twice) or whose outputs are not finite fails alone; a pass the
// backend fails fails its requests. Like State.Forward it does not advance
// any State: call Advance or Keep on each afterwards.
func (b *Batcher) Forward(reqs []*Request) {
	limit := 0
	if ir, ok := b.r.Backend.(InvariantRower); ok {
		limit = ir.InvariantRows()
	}
	seen := map[*State]bool{}
	var pass []*Request
	rows := 0
	flush := func() {
		if len(pass) > 0 {
			b.run(pass)
		}
		pass, rows = nil, 0
	}
	for _, q := range reqs {
		q.Err = nil
		s, n, nOut := q.State, len(q.Batch.Tokens), len(q.Batch.Rows)
		switch {
		case s == nil || s.r != b.r || s.cache == nil:
			q.Err = fmt.Errorf("llama: joint forward of a State that is closed or of another model")
		case n == 0 || nOut == 0 || len(q.Batch.Depth) != n || len(q.Batch.End) != n:
			q.Err = fmt.Errorf("llama: empty or inconsistent batch")
		case s.len+n > s.cap:
			q.Err = fmt.Errorf("llama: %d cached + %d new tokens exceed the context of %d", s.len, n, s.cap)
		case seen[s]:
			q.Err = fmt.Errorf("llama: a State twice in one joint forward")
		}
		for _, r := range q.Batch.Rows {
			if q.Err == nil && (r < 0 || int(r) >= n) {
				q.Err = fmt.Errorf("llama: output row %d of a batch of %d", r, n)
			}
		}
		if q.Err != nil {
			continue
		}
		seen[s] = true
		if limit > 0 && rows+n > limit {
			flush() // a request larger than the limit runs alone, as it would on its own
		}
		pass = append(pass, q)
		rows += n
	}
	flush()
}

// run runs one pass over reqs (valid, distinct States).
func (b *Batcher) run(reqs []*Request) {
	fail := func(err error) {
		for _, q := range reqs {
			q.Err = err
		}
	}
	var key strings.Builder
	n, nOut := 0, 0
	for _, q := range reqs {
		fmt.Fprintf(&key, "%p:%d:%d;", q.State, len(q.Batch.Tokens), len(q.Batch.Rows))
		n += len(q.Batch.Tokens)
		nOut += len(q.Batch.Rows)
	}
	f := b.plan(key.String())
	if f == nil {
		var err error
		if f, err = b.r.buildJoint(reqs, n, nOut); err != nil {
			fail(err)
			return
		}
		b.store(key.String(), f)
	}
	tokens, pos, end := make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
	kvLen, rows := make([]int32, 0, len(reqs)), make([]int32, 0, nOut)
	for _, q := range reqs {
		lo := int32(len(tokens))
		tokens = append(tokens, q.Batch.Tokens...)
		for _, d := range q.Batch.Depth {
			pos = append(pos, int32(q.State.len)+d)
		}
		end = append(end, q.Batch.End...) // local to the sequence, as its Attention reads them
		kvLen = append(kvLen, int32(q.State.len))
		for _, r := range q.Batch.Rows {
			rows = append(rows, lo+r)
		}
	}
	p := f.plan
	for _, w := range []struct {
		a *graph.Array
		v []int32
	}{{f.tokens, tokens}, {f.pos, pos}, {f.kvLen, kvLen}, {f.end, end}, {f.rows, rows}} {
		if err := p.Write(w.a, w.v); err != nil {
			fail(err)
			return
		}
	}
	if err := p.Run(); err != nil {
		fail(fmt.Errorf("llama: forward: %w", err))
		return
	}
	b.stats.Passes++
	b.stats.Rows += n
	b.stats.Requests += len(reqs)
	c := &b.r.Model.Config
	for _, out := range []struct {
		a     *graph.Array
		what  string
		width int
		dst   func(q *Request) []float32
	}{
		{f.logits, "logits", c.Vocab, func(q *Request) []float32 { return q.Logits }},
		{f.hidden, "hidden state", c.Dim, func(q *Request) []float32 { return q.Hidden }},
	} {
		wanted := false
		for _, q := range reqs {
			wanted = wanted || out.dst(q) != nil
		}
		if !wanted {
			continue
		}
		all := make([]float32, nOut*out.width)
		if err := p.Read(out.a, all); err != nil {
			fail(err)
			return
		}
		at := 0
		for i, q := range reqs {
			size := len(q.Batch.Rows) * out.width
			if dst := out.dst(q); dst != nil && q.Err == nil {
				if len(dst) != size {
					q.Err = fmt.Errorf("llama: %s of %d floats for %d rows of %d", out.what, len(dst), len(q.Batch.Rows), out.width)
				} else {
					copy(dst, all[at:at+size])
					q.Err = q.State.checkFinite(out.what, q.Batch, pos[f.starts[i]:], dst, out.width)
				}
			}
			at += size
		}
	}
}

// plan returns the cached plan for key, marking it used, or nil.
func (b *Batcher) plan(key string) *jointGraph {
	f := b.plans[key]
	if f == nil {
		return nil
	}
	for i, k := range b.lru {
		if k == key {
			b.lru = append(append(b.lru[:i:i], b.lru[i+1:]...), key)
			break
		}
	}
	return f
}

// store caches f under key, freeing the least recently used plan beyond
// maxJointPlans.
func (b *Batcher) store(key string, f *jointGraph) {
	b.stats.Compiles++
	b.plans[key] = f
	b.lru = append(b.lru, key)
	for len(b.lru) > maxJointPlans {
		old := b.lru[0]
		b.lru = b.lru[1:]
		b.plans[old].plan.Free()
		delete(b.plans, old)
	}
}

// Forget frees the plans that involve s; call it before closing s.
func (b *Batcher) Forget(s *State) {
	kept := b.lru[:0]
	for _, k := range b.lru {
		f := b.plans[k]
		uses := false
		for _, t := range f.states {
			uses = uses || t == s
		}
		if uses {
			f.plan.Free()
			delete(b.plans, k)
			continue
		}
		kept = append(kept, k)
	}
	b.lru = kept
}

// Close frees every plan.
func (b *Batcher) Close() { b.Release() }

// Release frees every cached plan; the Batcher stays usable and compiles
// plans again as passes need them.
func (b *Batcher) Release() {
	for _, f := range b.plans {
		f.plan.Free()
	}
	b.plans, b.lru = map[string]*jointGraph{}, nil
}

// buildJoint writes the forward pass of reqs as one graph: the layers of
// build, whose row-wise ops (embedding, norms, matmuls, RoPE, SwiGLU)
// take all n rows at once, and per sequence a KVWrite into its own cache
// and an Attention over it, on its rows (Slice views), whose outputs are
// joined back into rows (Concat of [1, rows·width] views, which is a
// concatenation of rows in memory).
func (r *Runner) buildJoint(reqs []*Request, n, nOut int) (*jointGraph, error) {
	c := &r.Model.Config
	m := r.Model
	g := graph.New()
	f := &jointGraph{
		tokens: g.Input("tokens", graph.I32, n),
		pos:    g.Input("positions", graph.I32, n),
		kvLen:  g.Input("kv_len", graph.I32, len(reqs)),
		end:    g.Input("tree_end", graph.I32, n),
		rows:   g.Input("out_rows", graph.I32, nOut),
	}
	at := 0
	for _, q := range reqs {
		f.states = append(f.states, q.State)
		f.starts = append(f.starts, at)
		at += len(q.Batch.Tokens)
	}
	f.starts = append(f.starts, at)
	x := r.embed(g, f.tokens)
	for i := range m.Layers {
		segs := make([]segment, len(f.states))
		for j, s := range f.states {
			lo, hi := f.starts[j], f.starts[j+1]
			segs[j] = segment{lo: lo, hi: hi, k: r.cacheVar(g, s, i, 0), v: r.cacheVar(g, s, i, 1),
				kvLen: graph.Slice(f.kvLen, j, j+1), end: graph.Slice(f.end, lo, hi)}
		}
		x = r.addLayer(g, x, f.pos, i, segs)
	}
	x = graph.GatherRows(x, f.rows)
	f.hidden = graph.RMSNorm(x, r.weight(g, &m.Norm), c.NormEps)
	f.logits = r.head(g, f.hidden)
	p, err := graph.Compile(r.Backend, f.logits, f.hidden)
	if err != nil {
		return nil, err
	}
	f.plan = p
	return f, nil
}

// concatAll joins [1, w_i] arrays into [1, Σw_i], halving the list each
// round so that each element is copied about log2(len) times.
func concatAll(parts []*graph.Array) *graph.Array {
	for len(parts) > 1 {
		var next []*graph.Array
		for i := 0; i+1 < len(parts); i += 2 {
			next = append(next, graph.Concat(parts[i], parts[i+1]))
		}
		if len(parts)%2 == 1 {
			next = append(next, parts[len(parts)-1])
		}
		parts = next
	}
	return parts[0]
}

// cacheVar declares layer l's K (which=0) or V (which=1) cache of s in g.
// Unlike State.kv it keeps nothing in s, since joint graphs come and go.
func (r *Runner) cacheVar(g *graph.Graph, s *State, l, which int) *graph.Array {
	c := &r.Model.Config
	return g.Var("cache."+strconv.Itoa(l)+"."+string("kv"[which]), s.cache[2*l+which], 0, r.kvType(), c.KVHeads, s.cap, c.HeadDim)
}
