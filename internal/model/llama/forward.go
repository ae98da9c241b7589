package llama

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

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
	x := r.embed(g, f.tokens) // x = embed_tokens(tokens)      [n, dim]
	for i := range m.Layers {
		x = r.addLayer(g, x, f.pos, i, []segment{{lo: 0, hi: n, k: s.kv(g, i, 0), v: s.kv(g, i, 1), kvLen: f.kvLen, end: f.end}})
	}
	x = graph.GatherRows(x, f.rows)                              // only the rows asked for
	f.hidden = graph.RMSNorm(x, r.weight(g, &m.Norm), c.NormEps) // hidden = norm(x)   [nOut, dim]
	f.logits = r.head(g, f.hidden)                               // logits = lm_head(hidden) [nOut, vocab]
	return f.logits, f.hidden
}

// embed is the embeddings of tokens [n], [n, dim], times Gemma's
// normalizer where the model has one.
func (r *Runner) embed(g *graph.Graph, tokens *graph.Array) *graph.Array {
	x := graph.Embed(r.weight(g, &r.Model.Embed), tokens)
	if r.embedScale.Present() {
		x = graph.Mul(x, r.weight(g, &r.embedScale)) // x = x * normalizer (Gemma)
	}
	return x
}

// head is the logits of hidden states [n, dim], [n, vocab]: the output
// projection, soft-capped where the model caps them (Gemma 2).
func (r *Runner) head(g *graph.Graph, hidden *graph.Array) *graph.Array {
	logits := graph.MatMul(hidden, r.weight(g, &r.Model.Output))
	if c := r.Model.Config.FinalSoftCap; c > 0 {
		logits = graph.SoftCap(logits, c) // logits = tanh(logits / cap) * cap
	}
	return logits
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
