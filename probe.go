package redrafter

import (
	"errors"
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// A Probe runs the model's forward pass directly, outside of generation, for
// the tools that measure the model or learn from it: the benchmark times
// passes of n tokens, and draft-head distillation reads every position's
// hidden state. It owns a KV cache of the engine's context, separate from
// every Session's. Decoding text is a Session's job, not a Probe's.
//
// A Probe is not safe for concurrent use.
type Probe struct {
	e  *Engine
	st *llama.State
}

// NewProbe returns a probe with an empty cache.
func (e *Engine) NewProbe() (*Probe, error) {
	if e.runner == nil {
		return nil, ErrClosed
	}
	st, err := e.runner.NewState(e.context)
	if err != nil {
		return nil, err
	}
	return &Probe{e: e, st: st}, nil
}

// Forward runs tokens through the model as one causal chain after the
// entries the probe has kept, and writes every position's logits
// ([len(tokens), vocab]) and final-norm hidden state ([len(tokens), dim])
// into the slices that are not nil. Their cache entries are written but not
// kept: the next Forward overwrites them unless Keep keeps them first.
func (p *Probe) Forward(tokens []int32, logits, hidden []float32) error {
	n := len(tokens)
	c := p.e.cfg
	switch {
	case p.st == nil || p.e.runner == nil:
		return ErrClosed
	case n == 0:
		return errors.New("redrafter: probe: no tokens")
	case logits != nil && len(logits) < n*c.Vocab:
		return fmt.Errorf("redrafter: probe: logits hold %d values, want %d×%d", len(logits), n, c.Vocab)
	case hidden != nil && len(hidden) < n*c.Dim:
		return fmt.Errorf("redrafter: probe: hidden holds %d values, want %d×%d", len(hidden), n, c.Dim)
	}
	// Asking for no output computes the last row only (the cheapest plan).
	all := logits != nil || hidden != nil
	return p.st.Forward(llama.Chain(tokens, all), logits, hidden)
}

// Keep keeps the first n entries of the last Forward in the cache.
func (p *Probe) Keep(n int) error {
	if p.st == nil || p.e.runner == nil {
		return ErrClosed
	}
	if n < 0 || p.st.Len()+n > p.st.Cap() {
		return fmt.Errorf("redrafter: probe: cannot keep %d more entries after %d in a cache of %d", n, p.st.Len(), p.st.Cap())
	}
	p.st.Advance(n)
	return nil
}

// Reset empties the cache.
func (p *Probe) Reset() {
	if p.st != nil {
		p.st.Trim(0)
	}
}

// Cached is the number of entries kept (0 after Close).
func (p *Probe) Cached() int {
	if p.st == nil {
		return 0
	}
	return p.st.Len()
}

// Close releases the probe's cache; closing again does nothing.
func (p *Probe) Close() {
	if p.st != nil {
		p.st.Close()
		p.st = nil
	}
}
