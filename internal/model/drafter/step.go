package drafter

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// DeviceStep is a whole greedy ReDrafter step compiled as one plan, so
// that a device backend (Metal, CUDA) is waited for once per step: the beam
// search (as searchOnDevice), the beams laid out as the verification batch
// on the device (graph.BeamChains after each draft), the LLM's forward pass
// over that batch, its argmax per token, greedy acceptance
// (graph.AcceptChains) and the KV compaction of the accepted path
// (graph.KVCompact with indices from the device). The host writes the
// context, the init token and the positions, and reads back the accepted
// tokens, the hidden state that drafts the next step, and a few integers
// and floats to check for NaN.
//
// The batch is the chains layout of graph.AcceptChainsOp: the root and
// every beam as its own chain of L-1 drafts, shared prefixes not merged,
// so that N = 1+W·(L-1) is fixed and one plan serves every step. The
// tokens equal those of the merged tree (TreeBuilder, AcceptGreedy): a
// token's output depends only on the keys it sees (the root, the cache and
// its own beam's earlier drafts), which are the same whether or not
// another beam repeats them, and every beam with the longest agreement
// holds the same tokens. A repeated prefix costs rows of verification.
//
// A DeviceStep belongs to one llama.State (it writes that cache) and is not
// safe for concurrent use; Close frees its plan.
type DeviceStep struct {
	W, L, N int

	st   *llama.State
	g    *graph.Graph
	plan *graph.Plan
	// inputs
	tree, context, pos, kvLen *graph.Array
	// outputs
	accept, argmax, top, hidden, lastSel *graph.Array
	// host values
	treeVals, posVals, depth []int32
	acceptVals, argmaxVals   []int32
	selVals                  []int32
	topVals                  []float32
}

// ChainsBatch returns the depths and interval ends of w beams of l tokens in
// the chains layout (see graph.AcceptChainsOp), the tree description of
// graph.AttentionOp.
func ChainsBatch(w, l int) (depth, end []int32) {
	n := 1 + w*(l-1)
	depth, end = make([]int32, n), make([]int32, n)
	end[0] = int32(n - 1)
	for i := range w {
		last := int32(1 + i*(l-1) + l - 2)
		for t := 1; t < l; t++ {
			j := 1 + i*(l-1) + t - 1
			depth[j], end[j] = int32(t), last
		}
	}
	return depth, end
}

// NewDeviceStep compiles the greedy step of w beams of l tokens against st,
// the LLM's state, whose runner must be the one d was bound with.
func (d *Drafter) NewDeviceStep(st *llama.State, w, l int) (*DeviceStep, error) {
	if w < 1 || w > MaxBeamWidth || l < 2 {
		return nil, fmt.Errorf("drafter: device step of %d beams of length %d", w, l)
	}
	c := d.Head.Config
	n := 1 + w*(l-1)
	g := graph.New()
	s := &DeviceStep{W: w, L: l, N: n, st: st, g: g,
		tree:    g.Input("tree", graph.I32, n),
		context: g.Input("context", graph.F32, 1, c.HiddenSize),
		pos:     g.Input("positions", graph.I32, n),
		kvLen:   g.Input("kv_len", graph.I32, 1),
	}
	state := g.Input("state", graph.F32, 1, c.HiddenSize)
	start := g.Input("beams", graph.I32, 3, w)
	zero := g.Input("zeros", graph.I32, w)
	end := g.Input("tree_end", graph.I32, n)
	rows := g.Input("out_rows", graph.I32, n)

	// Draft: the init token is the tree's root, and each draft's choices
	// are written into the batch's tokens.
	sel := d.addSearch(g, graph.Slice(s.tree, 0, 1), s.context, state, start, zero, w, l)
	tokens := s.tree
	for t, sl := range sel {
		tokens = graph.BeamChains(tokens, sl, t+1)
	}
	s.lastSel = sel[len(sel)-1]
	// Verify every token, choose on the device, compact the cache.
	logits, hidden := st.AddForward(g, tokens, s.pos, s.kvLen, end, rows)
	s.argmax = graph.Argmax(logits)
	s.top = graph.TakeAlong(logits, graph.Reshape(s.argmax, n, 1)) // each row's largest logit, checked for NaN
	s.accept = graph.AcceptChains(tokens, s.argmax, w)
	flat := graph.Reshape(s.accept, 3*l)
	s.hidden = graph.GatherRows(hidden, graph.Slice(flat, 2*l, 2*l+1)) // the last accepted token's
	outs := append([]*graph.Array{s.accept, s.argmax, s.top, s.hidden, s.lastSel},
		st.AddKeep(g, s.kvLen, graph.Reshape(graph.Slice(s.accept, 0, 1), l))...)
	p, err := graph.Compile(d.llm.Backend, outs...)
	if err != nil {
		st.Release(g)
		return nil, err
	}
	s.plan = p

	// What never changes is written once.
	depth, endVals := ChainsBatch(w, l)
	rowVals := make([]int32, n)
	for i := range rowVals {
		rowVals[i] = int32(i)
	}
	for _, in := range []struct {
		a *graph.Array
		v any
	}{{state, make([]float32, c.HiddenSize)}, {start, startBeams(w)}, {zero, make([]int32, w)}, {end, endVals}, {rows, rowVals}} {
		if err := p.Write(in.a, in.v); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.depth = depth
	s.treeVals, s.posVals = make([]int32, n), make([]int32, n)
	s.acceptVals, s.argmaxVals = make([]int32, 3*l), make([]int32, n)
	s.selVals, s.topVals = make([]int32, 3*w), make([]float32, n)
	return s, nil
}

// Close frees the plan's buffers and the state's record of the graph.
func (s *DeviceStep) Close() {
	if s.plan != nil {
		s.plan.Free()
		s.st.Release(s.g)
		s.plan = nil
	}
}

// Run runs one step from h, the final-norm hidden state of the last cached
// token (overwritten with that of the last accepted one), and init, the
// token the LLM chose after it. It returns the accepted drafts followed by
// the LLM's next token (n+1 tokens for n accepted drafts; valid until the
// next Run). The state keeps init and the accepted drafts (Len grows by
// n+1); the next token is the next step's init. The state must have room
// for N more tokens.
func (s *DeviceStep) Run(h []float32, init int32) (emitted []int32, err error) {
	kv := s.st.Len()
	if kv+s.N > s.st.Cap() {
		return nil, fmt.Errorf("drafter: a step of %d tokens after %d cached exceeds the context of %d", s.N, kv, s.st.Cap())
	}
	s.treeVals[0] = init
	for j, d := range s.depth {
		s.posVals[j] = int32(kv) + d
	}
	p := s.plan
	for _, in := range []struct {
		a *graph.Array
		v any
	}{{s.tree, s.treeVals}, {s.context, h}, {s.pos, s.posVals}, {s.kvLen, []int32{int32(kv)}}} {
		if err := p.Write(in.a, in.v); err != nil {
			return nil, err
		}
	}
	if err := p.Run(); err != nil {
		return nil, fmt.Errorf("drafter: step: %w", err)
	}
	for _, out := range []struct {
		a *graph.Array
		v any
	}{{s.lastSel, s.selVals}, {s.accept, s.acceptVals}, {s.argmax, s.argmaxVals}, {s.top, s.topVals}, {s.hidden, h}} {
		if err := p.Read(out.a, out.v); err != nil {
			return nil, err
		}
	}
	// The cache past kv was written, but nothing is kept until the checks
	// pass: an error leaves the state as it was.
	if err := nonFiniteDraft(s.selVals, s.W, s.L-1); err != nil {
		return nil, err
	}
	for j, x := range s.topVals {
		if x-x != 0 { // a row's largest logit: +Inf, or NaN where the argmax met one
			return nil, &llama.NonFiniteError{What: "logits", Pos: kv + int(s.depth[j]), Index: int(s.argmaxVals[j]), Value: x}
		}
	}
	l := s.L
	last, n := int(s.acceptVals[2*l]), int(s.acceptVals[2*l+1])
	for i, x := range h {
		if x-x != 0 {
			return nil, &llama.NonFiniteError{What: "hidden state", Pos: kv + int(s.depth[last]), Index: i, Value: x}
		}
	}
	s.st.Advance(n + 1)
	return s.acceptVals[l : l+n+1], nil
}
