package inflate

import (
	"context"
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// Head pads a draft head made for the original model to the inflated
// hidden size D′, so that on the inflated model it drafts the same beams.
//
// The head reads the LLM's final-norm hidden state h (now [h; 0]) and the
// LLM's embedding (now [e; 0]). The RNN matrices [H, H] become [D′, D′]
// with the original in the top-left corner, so the state is [s; 0]. The
// blocks act on the concatenation [h; s]; without an input projection their
// width 2H becomes 2D′, and coordinate i of [h; s] moves to i (i < H) or
// D′+i−H (the s half), in the blocks' rows and columns and in the vocabulary
// projection's columns. With an input projection only its columns move and
// the exit width stays.
//
// exit, when not 0, is the inflated head's exit width E′ instead: the blocks
// and the vocabulary projection act on E′ coordinates, the original ones
// first, and an input projection [E′, 2D′] carries [h; s] there (the
// original one's rows and columns moved, or, for a head without one, 1 at
// each original coordinate of the concatenation and 0 elsewhere, which is
// exact). A head narrower than 2D′ costs less to evaluate; what it drafts is
// still the original head's.
func (p *Plan) Head(h *drafter.Head, dt graph.DType, exit int) (*drafter.Head, error) {
	if _, err := (Options{DType: dt}).dtype(); err != nil {
		return nil, err
	}
	if err := h.Check(p.From); err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	c := h.Config
	hs, d := c.HiddenSize, p.To.Dim
	concat := func(i int) int { // [h; s] coordinate
		if i < hs {
			return i
		}
		return d + i - hs
	}
	nc := c
	nc.HiddenSize = d
	exit, err := HeadExit(c, d, exit)
	if err != nil {
		return nil, err
	}
	exitMap := identity
	if exit == 2*d {
		exitMap = concat
	}
	nc.ExitDim = exit
	var jobs []job
	var dst []*llama.Weight
	out := &drafter.Head{Config: nc, Blocks: make([]drafter.Block, len(h.Blocks))}
	mat := func(to *llama.Weight, w llama.Weight, rows, cols int, rowMap, colMap func(int) int) {
		dst = append(dst, to)
		jobs = append(jobs, job{name: w.Name, shape: []int{rows, cols}, fill: func(buf []float32) {
			src, sc := values(w), w.Shape[1]
			for r := range w.Shape[0] {
				row := buf[rowMap(r)*cols:]
				for c, v := range src[r*sc : (r+1)*sc] {
					row[colMap(c)] = v
				}
			}
		}})
	}
	vec := func(to *llama.Weight, w llama.Weight, n int, idx func(int) int) {
		dst = append(dst, to)
		jobs = append(jobs, job{name: w.Name, shape: []int{n}, vector: true, fill: func(buf []float32) {
			for i, v := range values(w) {
				buf[idx(i)] = v
			}
		}})
	}
	if c.RNN {
		mat(&out.RnnW, h.RnnW, d, d, identity, identity)
		mat(&out.RnnU, h.RnnU, d, d, identity, identity)
		vec(&out.RnnUBias, h.RnnUBias, d, identity)
	}
	switch {
	case h.InputProj.Present():
		mat(&out.InputProj, h.InputProj, exit, 2*d, identity, concat)
		vec(&out.InputProjBias, h.InputProjBias, exit, identity)
	case exit != 2*d:
		// A new input projection that places [h; s]'s original
		// coordinates first.
		dst = append(dst, &out.InputProj, &out.InputProjBias)
		jobs = append(jobs, job{name: "input_proj.weight", shape: []int{exit, 2 * d}, fill: func(buf []float32) {
			for i := range 2 * hs {
				buf[i*2*d+concat(i)] = 1
			}
		}}, job{name: "input_proj.bias", shape: []int{exit}, vector: true})
	}
	for k, b := range h.Blocks {
		mat(&out.Blocks[k].W, b.W, exit, exit, exitMap, exitMap)
		vec(&out.Blocks[k].B, b.B, exit, exitMap)
	}
	mat(&out.Vocab, h.Vocab, c.VocabSize, exit, identity, exitMap)
	tensors, err := runJobs(context.Background(), jobs, dt, nil)
	if err != nil {
		return nil, err
	}
	for i, t := range tensors {
		w, err := llama.WeightOf(&t)
		if err != nil {
			return nil, err
		}
		*dst[i] = w
	}
	return out, nil
}

// HeadExit returns the exit width Head gives head c inflated to hidden size
// d when asked for exit (0: the default), or why it cannot.
func HeadExit(c drafter.Config, d, exit int) (int, error) {
	switch {
	case c.ExitDim == 2*c.HiddenSize && (exit == 0 || exit == 2*d):
		return 2 * d, nil
	case exit == 0:
		return c.ExitDim, nil
	case exit == 2*d:
		return 0, fmt.Errorf("inflate: exit width %d is 2×%d, which means no input projection, but the head has one", exit, d)
	case exit < c.ExitDim:
		return 0, fmt.Errorf("inflate: exit width %d is narrower than the head's %d", exit, c.ExitDim)
	}
	return exit, nil
}

// HeadDir inflates the draft head in directory in (config.json +
// model.safetensors) to exit width exit (0: as Head) and saves it to out.
func (p *Plan) HeadDir(in, out string, dt graph.DType, exit int) error {
	h, err := drafter.Load(in)
	if err != nil {
		return err
	}
	defer h.Close()
	nh, err := p.Head(h, dt, exit)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, in)
	}
	return nh.Save(out)
}
