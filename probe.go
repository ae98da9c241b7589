package redrafter

import (
	"errors"
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// probe is apihooks.Probe: the model's forward pass, outside of generation,
// for the tools. Decoding text is a Session's job, not a probe's.
type probe struct {
	e  *Engine
	st *llama.State
}

// newProbe returns a probe with an empty cache (apihooks.NewProbe).
func (e *Engine) newProbe() (*probe, error) {
	if e.runner == nil {
		return nil, ErrClosed
	}
	st, err := e.runner.NewState(e.context)
	if err != nil {
		return nil, err
	}
	return &probe{e: e, st: st}, nil
}

// Forward runs tokens through the model as one causal chain after the
// entries the probe has kept, and writes every position's logits
// ([len(tokens), vocab]) and final-norm hidden state ([len(tokens), dim])
// into the slices that are not nil. Their cache entries are written but not
// kept: the next Forward overwrites them unless Keep keeps them first.
func (p *probe) Forward(tokens []int32, logits, hidden []float32) error {
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
func (p *probe) Keep(n int) error {
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
func (p *probe) Reset() {
	if p.st != nil {
		p.st.Trim(0)
	}
}

// Cached is the number of entries kept (0 after Close).
func (p *probe) Cached() int {
	if p.st == nil {
		return 0
	}
	return p.st.Len()
}

// Close releases the probe's cache; closing again does nothing.
func (p *probe) Close() {
	if p.st != nil {
		p.st.Close()
		p.st = nil
	}
}
