package train

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// Tensor is one trainable weight in float32, named by its checkpoint key.
type Tensor struct {
	Name  string
	Shape []int // a Linear weight is [out, in]
	Data  []float32
}

// Params are a draft head's weights in training form. Absent tensors
// (RNN weights without an RNN, the input projection when E = 2H) are nil.
type Params struct {
	Config drafter.Config
	List   []*Tensor // every tensor, in checkpoint order

	RnnW, RnnU, RnnB *Tensor // [H, H], [H, H], [H]
	InW, InB         *Tensor // [E, 2H], [E]
	BlkW, BlkB       []*Tensor
	Vocab            *Tensor // [V, E]
}

// NewParams returns zero weights shaped by c (ExitDim 0 means 2H).
func NewParams(c drafter.Config) *Params {
	if c.ExitDim == 0 {
		c.ExitDim = 2 * c.HiddenSize
	}
	p := &Params{Config: c}
	mk := func(name string, shape ...int) *Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		t := &Tensor{Name: name, Shape: shape, Data: make([]float32, n)}
		p.List = append(p.List, t)
		return t
	}
	h, e := c.HiddenSize, c.ExitDim
	if c.RNN {
		p.RnnW = mk("rnn_w.weight", h, h)
		p.RnnU = mk("rnn_u.weight", h, h)
		p.RnnB = mk("rnn_u.bias", h)
	}
	if e != 2*h {
		p.InW = mk("input_proj.weight", e, 2*h)
		p.InB = mk("input_proj.bias", e)
	}
	for k := range c.NumDraftLayers {
		p.BlkW = append(p.BlkW, mk(fmt.Sprintf("lm_head.%d.linear.weight", k), e, e))
		p.BlkB = append(p.BlkB, mk(fmt.Sprintf("lm_head.%d.linear.bias", k), e))
	}
	p.Vocab = mk(fmt.Sprintf("lm_head.%d.weight", c.NumDraftLayers), c.VocabSize, e)
	return p
}

// Count is the number of trainable values.
func (p *Params) Count() int {
	n := 0
	for _, t := range p.List {
		n += len(t.Data)
	}
	return n
}

// Clone returns a deep copy.
func (p *Params) Clone() *Params {
	q := NewParams(p.Config)
	for i, t := range p.List {
		copy(q.List[i].Data, t.Data)
	}
	return q
}

// FromHead copies a head's weights (any float dtype) into training form.
func FromHead(h *drafter.Head) (*Params, error) {
	p := NewParams(h.Config)
	ws := map[string]llama.Weight{}
	add := func(w llama.Weight) {
		if w.Present() {
			ws[w.Name] = w
		}
	}
	add(h.RnnW)
	add(h.RnnU)
	add(h.RnnUBias)
	add(h.InputProj)
	add(h.InputProjBias)
	for _, b := range h.Blocks {
		add(b.W)
		add(b.B)
	}
	add(h.Vocab)
	for _, t := range p.List {
		w, ok := ws[t.Name]
		if !ok {
			return nil, fmt.Errorf("train: the draft head has no tensor %q", t.Name)
		}
		if w.Shape.Numel() != len(t.Data) {
			return nil, fmt.Errorf("train: tensor %q has shape %v, want %v", t.Name, w.Shape, t.Shape)
		}
		f := llama.ToF32(w)
		copy(t.Data, f32s(f.Data))
	}
	return p, nil
}

// Head returns a draft head holding a copy of the weights (f32), ready for
// Head.Save or drafter.NewDrafter.
func (p *Params) Head() *drafter.Head {
	h := &drafter.Head{Config: p.Config}
	w := func(t *Tensor) llama.Weight {
		if t == nil {
			return llama.Weight{}
		}
		d := append([]float32(nil), t.Data...)
		return llama.Weight{Name: t.Name, DType: graph.F32, Shape: graph.Shape(t.Shape), Data: graph.AsBytes(d)}
	}
	h.RnnW, h.RnnU, h.RnnUBias = w(p.RnnW), w(p.RnnU), w(p.RnnB)
	h.InputProj, h.InputProjBias = w(p.InW), w(p.InB)
	for k := range p.BlkW {
		h.Blocks = append(h.Blocks, drafter.Block{W: w(p.BlkW[k]), B: w(p.BlkB[k])})
	}
	h.Vocab = w(p.Vocab)
	return h
}
