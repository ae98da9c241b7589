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

// A stepper runs ReDrafter steps for one generation: the host's
// (hostStepper: draft, build the tree, verify, accept, commit) or one plan
// on the device (deviceStepper). The loop around them (speculative) is the
// same: the room check, the device counts, the stop rules and the ledger.
type stepper interface {
	// room is the most cache entries one step writes.
	room() int
	// step drafts from h, the hidden state of the token before init,
	// verifies init and the drafts, accepts a path, and commits it: the
	// session keeps init's and the accepted drafts' cache entries and
	// tokens, and h becomes the hidden state of the last of them. It adds
	// the time of its phases to st.
	step(h []float32, init int32, st *DraftStats) (stepResult, error)
	close()
}

// stepResult is what a step decided.
type stepResult struct {
	accepted []int32 // the drafts accepted after init (valid until the next step)
	next     int32   // the verifier's token after them, the next step's init
	packed   int     // the tokens verified
	w, l     int     // the beams' shape
}

// speculative is the ReDrafter loop: draft W beams of L tokens from the
// last hidden state, verify them in one forward pass, keep the accepted
// path's cache entries, emit its tokens, repeat.
func (d *decoder) speculative(ctx context.Context, p *specPlan) error {
	s := d.s
	st := &DraftStats{}
	d.em.res.Stats.Draft = st
	d.em.res.Stats.BeamWidth, d.em.res.Stats.BeamLength = p.w, p.l
	counter, _ := s.e.be.(graph.Counter) // device work per step, where the backend counts it

	init, err := d.pick(s.logits) // the first token comes from the prefill
	if err != nil {
		return err
	}
	h := append([]float32(nil), s.hidden...)
	if done, err := d.em.push(init); done || err != nil {
		return err
	}
	steps, err := d.newStepper(p)
	if err != nil {
		return err
	}
	defer steps.close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.state.Len()+steps.room() > s.state.Cap() {
			return d.finishNearEnd(ctx, init)
		}
		var before graph.Counts
		if counter != nil {
			before = counter.Counts()
		}
		r, err := steps.step(h, init, st)
		if err != nil {
			return err
		}
		t := time.Now()
		if counter != nil {
			c := counter.Counts().Sub(before)
			st.Device.Waits += c.Waits
			st.Device.Dispatches += c.Dispatches
			st.Device.CommandBuffers += c.CommandBuffers
		}
		emitted, done, err := d.emit(r)
		st.record(r.packed, r.w, r.l, len(r.accepted), emitted)
		st.Other += time.Since(t)
		if done || err != nil {
			return err
		}
		init = r.next
	}
}

// newStepper picks the device step where it pays (deviceStep), else the
// host loop.
func (d *decoder) newStepper(p *specPlan) (stepper, error) {
	if dr, ok := d.deviceStep(p); ok {
		step, err := dr.NewDeviceStep(d.s.state, p.w, p.l)
		if err != nil {
			return nil, err
		}
		return &deviceStepper{s: d.s, ds: step}, nil
	}
	return newHostStepper(d, p), nil
}

// emit applies the stop rules to a step's tokens, the accepted drafts and
// then the verifier's next, in order; it returns how many it pushed (the
// one that ended the generation included) and whether it is over.
func (d *decoder) emit(r stepResult) (emitted int, done bool, err error) {
	for _, tok := range r.accepted {
		emitted++
		if done, err = d.em.push(tok); done || err != nil {
			return emitted, done, err
		}
	}
	emitted++
	done, err = d.em.push(r.next)
	return emitted, done, err
}

// commit appends init and the accepted drafts to the session's tokens,
// whose cache entries the step kept.
func (s *Session) commit(init int32, accepted []int32) {
	s.tokens = append(append(s.tokens, init), accepted...)
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

// hostStepper is the host's ReDrafter step: the draft source's beam
// search, the prefix tree (shared prefixes merged), one forward pass over
// it (alone or in the session's group), acceptance by the greedy or the
// sampling rule, and the accepted path kept in the cache.
type hostStepper struct {
	d *decoder
	p *specPlan

	builder drafter.TreeBuilder
	logits  []float32   // [maxN, vocab] the tree's logits
	hidden  []float32   // [maxN, dim] the tree's final-norm hidden states
	argmax  []int32     // [maxN] greedy: each node's argmax
	rows    []int32     // 0, 1, ... maxN-1: every node's output is read
	probs   [][]float64 // sampling: each node's distribution, made when a rule asks
	scratch []float64   // [vocab] for the sampling rules
	tokens  []int32     // the accepted drafts of the last step
}

func newHostStepper(d *decoder, p *specPlan) *hostStepper {
	c := d.s.e.cfg
	maxN := 1 + p.w*(p.l-1)
	t := &hostStepper{d: d, p: p,
		logits: make([]float32, maxN*c.Vocab), hidden: make([]float32, maxN*c.Dim),
		argmax: make([]int32, maxN), rows: make([]int32, maxN),
		probs: make([][]float64, maxN), scratch: make([]float64, c.Vocab)}
	for i := range t.rows {
		t.rows[i] = int32(i)
	}
	return t
}

func (t *hostStepper) room() int { return 1 + t.p.w*(t.p.l-1) }

func (t *hostStepper) close() {}

func (t *hostStepper) step(h []float32, init int32, st *DraftStats) (stepResult, error) {
	t0 := time.Now()
	beams, err := t.draft(h, init)
	if err != nil {
		return stepResult{}, err
	}
	t1 := time.Now()
	tree, err := t.builder.Build(beams.Tokens)
	if err != nil {
		return stepResult{}, err
	}
	t2 := time.Now()
	if err := t.verify(tree); err != nil {
		return stepResult{}, err
	}
	t3 := time.Now()
	path, next, err := t.accept(tree, beams)
	if err != nil {
		return stepResult{}, err
	}
	if err := t.commit(tree, path, h); err != nil {
		return stepResult{}, err
	}
	t4 := time.Now()
	st.Draft += t1.Sub(t0)
	st.Tree += t2.Sub(t1)
	st.Verify += t3.Sub(t2)
	st.Accept += t4.Sub(t3)
	return stepResult{accepted: t.tokens, next: next, packed: tree.N(), w: tree.Width(), l: tree.Length()}, nil
}

// draft proposes the step's beams after init from h. A member of a group
// under load drafts a smaller beam (down to none: an autoregressive step).
func (t *hostStepper) draft(h []float32, init int32) (*drafter.Beams, error) {
	s, greedy := t.d.s, t.d.opt.Sampling.Greedy()
	w, l := t.p.w, t.p.l
	if s.group != nil && greedy {
		// Shorter under load (1 is an autoregressive step). Greedy
		// only: its tokens do not depend on the beam, while a sampled
		// step's draws do, and a seed must give the same text in a
		// group as alone.
		w, l = s.group.beam(w, l)
	}
	if l <= 1 {
		return &drafter.Beams{Tokens: [][]int32{{init}}, LogQ: [][][]float32{nil}}, nil
	}
	beams, err := t.p.d.BeamSearch(h, init, w, l, t.p.accept == AcceptApple && !greedy)
	if err != nil {
		return nil, fmt.Errorf("redrafter: drafting after position %d: %w", s.state.Len(), err)
	}
	return beams, nil
}

// verify runs the tree through the model in one forward pass, every node's
// logits and hidden state read back.
func (t *hostStepper) verify(tree *drafter.Tree) error {
	c, n := t.d.s.e.cfg, tree.N()
	batch := llama.Batch{Tokens: tree.Tokens, Depth: tree.Depth, End: tree.End, Rows: t.rows[:n]}
	return t.d.s.run(batch, t.logits[:n*c.Vocab], t.hidden[:n*c.Dim])
}

// row is node u's logits from the last verify.
func (t *hostStepper) row(u int) []float32 {
	v := t.d.s.e.cfg.Vocab
	return t.logits[u*v : (u+1)*v]
}

// accept picks the tree's path to keep (from the root, init) and the token
// after it, by the greedy rule or the plan's sampling rule.
func (t *hostStepper) accept(tree *drafter.Tree, beams *drafter.Beams) (path []int32, next int32, err error) {
	if t.d.opt.Sampling.Greedy() {
		path, next = t.acceptGreedy(tree)
	} else if path, next, err = t.acceptSampled(tree, beams); err != nil {
		return nil, 0, err
	}
	return append([]int32(nil), path...), next, nil
}

// acceptGreedy keeps the longest path equal to the model's argmax.
func (t *hostStepper) acceptGreedy(tree *drafter.Tree) (path []int32, next int32) {
	for u := range tree.N() {
		t.argmax[u] = sample.Argmax(t.row(u))
	}
	beam, k := drafter.AcceptGreedy(tree, t.argmax[:tree.N()])
	path = tree.Path(beam, k)
	return path, t.argmax[path[len(path)-1]]
}

// acceptSampled draws the path by the plan's rule, making each node's
// distribution when the rule first reads it.
func (t *hostStepper) acceptSampled(tree *drafter.Tree, beams *drafter.Beams) (path []int32, next int32, err error) {
	s, vocab := t.d.s, t.d.s.e.cfg.Vocab
	clear(t.probs)
	var perr error // the first distribution that could not be made
	probs := func(u int) []float64 {
		if t.probs[u] == nil {
			t.probs[u] = make([]float64, vocab)
			if err := sample.Probs(t.probs[u], t.row(u), t.d.opt.Sampling.params()); err != nil {
				if perr == nil {
					perr = fmt.Errorf("redrafter: after position %d: %w", s.state.Len()+int(tree.Depth[u]), err)
				}
				clear(t.probs[u]) // a stand-in the rules can draw from; perr ends the step
				t.probs[u][0] = 1
			}
		}
		return t.probs[u]
	}
	if t.p.accept == AcceptApple {
		drafts := func(beam, depth int) []float64 {
			q := make([]float64, vocab)
			for i, lq := range beams.LogQ[beam][depth-1] {
				q[i] = math.Exp(float64(lq))
			}
			return q
		}
		path, next = drafter.AcceptApple(tree, probs, drafts, t.d.rng, t.scratch)
	} else {
		path, next = drafter.AcceptSample(tree, probs, t.d.rng, t.scratch)
	}
	return path, next, perr
}

// commit keeps the path's cache entries (compacting them to follow the
// cache), its tokens, and the last one's hidden state in h for the next
// draft.
func (t *hostStepper) commit(tree *drafter.Tree, path []int32, h []float32) error {
	s, dim := t.d.s, t.d.s.e.cfg.Dim
	if err := s.state.Keep(path); err != nil {
		return err
	}
	t.tokens = t.tokens[:0]
	for _, u := range path[1:] {
		t.tokens = append(t.tokens, tree.Tokens[u])
	}
	s.commit(tree.Tokens[path[0]], t.tokens)
	last := int(path[len(path)-1])
	copy(h, t.hidden[last*dim:(last+1)*dim])
	return nil
}
