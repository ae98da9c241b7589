package redrafter

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/sample"
)

// DraftOptions control ReDrafter speculative decoding.
type DraftOptions struct {
	// Off decodes autoregressively even when the engine has a draft head.
	Off bool
	// BeamWidth W and BeamLength L (the init token plus L-1 drafts); 0 picks
	// the backend's default (Engine.DefaultBeam).
	BeamWidth, BeamLength int
	// Accept is the acceptance rule when sampling: "exact" (the default)
	// preserves the sampling distribution exactly; "apple" reproduces the
	// reference implementation's rule, which does not. Greedy decoding
	// always accepts the longest path equal to the model's argmax.
	Accept string
}

// Accept rules.
const (
	AcceptExact = "exact"
	AcceptApple = "apple"
)

// DefaultBeam is the beam shape used when DraftOptions leave it unset. A
// backend that knows its device recommends one (Metal: W=1 on base M-series
// chips, 2 on Pro/Max, 3 on Ultra, as the paper found); otherwise the CPU
// default, chosen from measurements in docs/BENCHMARKS.md.
func (e *Engine) DefaultBeam() (width, length int) {
	if r, ok := e.be.(interface{ RecommendedBeam() (int, int) }); ok {
		return r.RecommendedBeam()
	}
	return cpuBeamWidth, cpuBeamLength
}

// The CPU's default beam: the fastest shape measured on the TinyLlama-shaped
// (inflated) stories260K in f16, 2.66× autoregressive decoding; wider beams
// draft more tokens per step but a CPU pays nearly linearly for verifying
// them (docs/BENCHMARKS.md, "Quantized weights").
const cpuBeamWidth, cpuBeamLength = 1, 5

// LoadDrafter loads a ReDrafter draft head (a directory with config.json and
// model.safetensors) and binds it next to the model. A head made for
// another model (vocabulary or hidden size) is refused.
func (e *Engine) LoadDrafter(dir string) error {
	if e.runner == nil {
		return ErrClosed
	}
	h, err := drafter.Load(dir)
	if err != nil {
		return err
	}
	d, err := drafter.NewDrafter(h, e.runner)
	if err != nil {
		h.Close()
		return err
	}
	if e.drafter != nil {
		e.drafter.Close()
		e.drafter.Head.Close()
	}
	e.drafter, e.draftSource = d, d
	return nil
}

// DraftHeadInfo describes a loaded draft head.
type DraftHeadInfo struct {
	Vocab      int  // vocabulary size (the model's)
	HiddenSize int  // the model's hidden size the head reads
	ExitDim    int  // width of the head's residual blocks ([h; s])
	Layers     int  // residual blocks
	RNN        bool // the recurrent state s is used
}

// DraftHead describes the loaded draft head; false when none is loaded.
func (e *Engine) DraftHead() (DraftHeadInfo, bool) {
	if e.drafter == nil {
		return DraftHeadInfo{}, false
	}
	c := e.drafter.Head.Config
	return DraftHeadInfo{Vocab: c.VocabSize, HiddenSize: c.HiddenSize, ExitDim: c.ExitDim, Layers: c.NumDraftLayers, RNN: c.RNN}, true
}

// beamSource drafts beams; *drafter.Drafter is the real one, tests plug in
// others to steer acceptance.
type beamSource interface {
	BeamSearch(h []float32, init int32, w, l int, keepLogQ bool) (*drafter.Beams, error)
}

// specPlan is a validated speculative configuration.
type specPlan struct {
	d      beamSource
	w, l   int
	accept string
}

// draftPlan validates o against the engine; nil means autoregressive.
func (e *Engine) draftPlan(o DraftOptions) (*specPlan, error) {
	if e.draftSource == nil || o.Off {
		return nil, nil
	}
	w, l := e.DefaultBeam()
	if o.BeamWidth != 0 {
		w = o.BeamWidth
	}
	if o.BeamLength != 0 {
		l = o.BeamLength
	}
	switch {
	case w < 1 || w > drafter.MaxBeamWidth:
		return nil, fmt.Errorf("redrafter: beam width %d outside [1, %d] (the draft head keeps its top %d tokens)", w, drafter.MaxBeamWidth, drafter.MaxBeamWidth)
	case l < 2:
		return nil, fmt.Errorf("redrafter: beam length %d: a beam needs the init token and at least one draft (L >= 2)", l)
	case 1+w*(l-1) >= e.context:
		return nil, fmt.Errorf("redrafter: beams of %d×%d need up to %d tokens, more than the context of %d", w, l, 1+w*(l-1), e.context)
	}
	accept := o.Accept
	switch accept {
	case "":
		accept = AcceptExact
	case AcceptExact, AcceptApple:
	default:
		return nil, fmt.Errorf("redrafter: unknown acceptance rule %q (exact or apple)", accept)
	}
	return &specPlan{d: e.draftSource, w: w, l: l, accept: accept}, nil
}

// speculative is the ReDrafter loop: draft W beams of L tokens from the
// last hidden state, verify their prefix tree in one forward pass, keep the
// accepted path's cache entries, repeat.
func (d *decoder) speculative(ctx context.Context, p *specPlan) error {
	if dr, ok := d.deviceStep(p); ok {
		return d.speculativeOnDevice(ctx, p, dr)
	}
	s := d.s
	c := s.e.cfg
	st := &drafter.Stats{}
	d.em.res.Stats.Draft = st
	d.em.res.Stats.BeamWidth, d.em.res.Stats.BeamLength = p.w, p.l
	var builder drafter.TreeBuilder
	maxN := 1 + p.w*(p.l-1)
	logits := make([]float32, maxN*c.Vocab)
	hidden := make([]float32, maxN*c.Dim)
	argmax := make([]int32, maxN)
	rows := make([]int32, maxN)
	for i := range rows {
		rows[i] = int32(i)
	}
	nodeProbs := make([][]float64, maxN)
	scratch := make([]float64, c.Vocab)
	counter, _ := s.e.be.(graph.Counter) // device work per step, where the backend counts it

	init, err := d.pick(s.logits) // the first token comes from the prefill
	if err != nil {
		return err
	}
	h := append([]float32(nil), s.hidden...)
	if done, err := d.em.push(init); done || err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.state.Len()+maxN > s.state.Cap() {
			return d.finishNearEnd(ctx, init)
		}
		var before graph.Counts
		if counter != nil {
			before = counter.Counts()
		}
		t0 := time.Now()
		w, l := p.w, p.l
		if s.group != nil && d.opt.Sampling.Greedy() {
			// Shorter under load (1 is an autoregressive step). Greedy
			// only: its tokens do not depend on the beam, while a sampled
			// step's draws do, and a seed must give the same text in a
			// group as alone.
			w, l = s.group.beam(w, l)
		}
		beams := &drafter.Beams{Tokens: [][]int32{{init}}, LogQ: [][][]float32{nil}}
		if l > 1 {
			if beams, err = p.d.BeamSearch(h, init, w, l, p.accept == AcceptApple && !d.opt.Sampling.Greedy()); err != nil {
				return fmt.Errorf("redrafter: drafting after position %d: %w", s.state.Len(), err)
			}
		}
		t1 := time.Now()
		tree, err := builder.Build(beams.Tokens)
		if err != nil {
			return err
		}
		t2 := time.Now()
		n := tree.N()
		batch := llama.Batch{Tokens: tree.Tokens, Depth: tree.Depth, End: tree.End, Rows: rows[:n]}
		if err := s.run(batch, logits[:n*c.Vocab], hidden[:n*c.Dim]); err != nil {
			return err
		}
		t3 := time.Now()
		var path []int32
		var next int32
		row := func(u int) []float32 { return logits[u*c.Vocab : (u+1)*c.Vocab] }
		if d.opt.Sampling.Greedy() {
			for u := range n {
				argmax[u] = sample.Argmax(row(u))
			}
			beam, k := drafter.AcceptGreedy(tree, argmax[:n])
			path = tree.Path(beam, k)
			next = argmax[path[len(path)-1]]
		} else {
			clear(nodeProbs)
			var perr error // the first distribution that could not be made
			probs := func(u int) []float64 {
				if nodeProbs[u] == nil {
					nodeProbs[u] = make([]float64, c.Vocab)
					if err := sample.Probs(nodeProbs[u], row(u), d.opt.Sampling); err != nil {
						if perr == nil {
							perr = fmt.Errorf("redrafter: after position %d: %w", s.state.Len()+int(tree.Depth[u]), err)
						}
						clear(nodeProbs[u]) // a stand-in the rules can draw from; perr ends the step
						nodeProbs[u][0] = 1
					}
				}
				return nodeProbs[u]
			}
			if p.accept == AcceptApple {
				drafts := func(beam, depth int) []float64 {
					q := make([]float64, c.Vocab)
					for i, lq := range beams.LogQ[beam][depth-1] {
						q[i] = math.Exp(float64(lq))
					}
					return q
				}
				path, next = drafter.AcceptApple(tree, probs, drafts, d.rng, scratch)
			} else {
				path, next = drafter.AcceptSample(tree, probs, d.rng, scratch)
			}
			if perr != nil {
				return perr
			}
		}
		path = append([]int32(nil), path...)
		if err := s.state.Keep(path); err != nil {
			return err
		}
		for _, u := range path {
			s.tokens = append(s.tokens, tree.Tokens[u])
		}
		last := int(path[len(path)-1])
		copy(h, hidden[last*c.Dim:(last+1)*c.Dim])
		t4 := time.Now()
		st.Draft += t1.Sub(t0)
		st.Tree += t2.Sub(t1)
		st.Verify += t3.Sub(t2)
		st.Accept += t4.Sub(t3)
		if counter != nil {
			d := counter.Counts().Sub(before)
			st.Device.Waits += d.Waits
			st.Device.Dispatches += d.Dispatches
			st.Device.CommandBuffers += d.CommandBuffers
		}

		emitted := 0
		done := false
		for _, u := range path[1:] {
			emitted++
			if done, err = d.em.push(tree.Tokens[u]); done || err != nil {
				break
			}
		}
		if !done && err == nil {
			emitted++
			done, err = d.em.push(next)
		}
		st.Record(tree, len(path)-1, emitted)
		st.Other += time.Since(t4)
		if done || err != nil {
			return err
		}
		init = next
	}
}

// finishNearEnd ends a speculative generation that is too close to the end
// of the context for a full step: it decodes one token at a time, as
// autoregressive decoding does, from init (a step that filled the cache
// exactly leaves no room for init, and the generation ends there).
func (d *decoder) finishNearEnd(ctx context.Context, init int32) error {
	s := d.s
	if s.state.Len()+1 >= s.state.Cap() {
		return nil
	}
	if err := s.forward([]int32{init}); err != nil {
		return err
	}
	return d.autoregressive(ctx)
}
