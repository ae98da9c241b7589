package drafter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// Config is the draft head's config.json, in the reference's names.
type Config struct {
	ModelType      string `json:"model_type,omitempty"` // "recurrent_drafting_drafter"
	VocabSize      int    `json:"vocab_size"`
	HiddenSize     int    `json:"hidden_size"`      // the LLM's hidden size H
	ExitDim        int    `json:"exit_dim"`         // width E of the residual blocks (2H: no input projection)
	NumDraftLayers int    `json:"num_draft_layers"` // residual blocks
	RNN            bool   `json:"rnn"`              // recurrent state; else a running sum of embeddings
}

// Head is a ReDrafter draft head: an RNN over the drafted tokens'
// embeddings (the LLM's own table) and residual SiLU blocks over
// [h; s] ending in its own vocabulary projection.
//
//	s_t    = SiLU(RnnW·e(tok) + RnnU·s_{t-1} + RnnUBias)     (rnn)    or  s_{t-1} + e(tok)
//	x      = InputProj·[h; s_t] + InputProjBias              (only if E != 2H)
//	x      = x + SiLU(Blocks[k].W·x + Blocks[k].B)           k = 0..NumDraftLayers-1
//	logits = Vocab·x
type Head struct {
	Config        Config
	RnnW          llama.Weight // [H, H]
	RnnU          llama.Weight // [H, H]
	RnnUBias      llama.Weight // [H]
	InputProj     llama.Weight // [E, 2H], absent when E == 2H
	InputProjBias llama.Weight // [E]
	Blocks        []Block
	Vocab         llama.Weight // [V, E]

	closer func() error
}

// Block is one residual block of the head.
type Block struct {
	W llama.Weight // [E, E]
	B llama.Weight // [E]
}

// Load reads a draft head from a directory holding config.json and
// model.safetensors (or its shards), the reference checkpoint layout.
func Load(dir string) (*Head, error) {
	raw, err := formats.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("drafter: %s is not a draft head checkpoint: %w", dir, err)
		}
		return nil, fmt.Errorf("drafter: %w", err)
	}
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("drafter: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	if c.VocabSize <= 0 || c.HiddenSize <= 0 || c.NumDraftLayers < 0 {
		return nil, fmt.Errorf("drafter: %s: vocab_size, hidden_size and num_draft_layers must be set", filepath.Join(dir, "config.json"))
	}
	if c.ExitDim == 0 {
		c.ExitDim = 2 * c.HiddenSize
	}
	ck, err := formats.OpenSafetensorsDir(dir)
	if err != nil {
		return nil, fmt.Errorf("drafter: %w", err)
	}
	h, err := bindHead(c, func(name string) (*formats.Tensor, bool) { return ck.Tensor(name) })
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("drafter: %s: %w", dir, err)
	}
	h.closer = ck.Close
	return h, nil
}

// bindHead finds every weight by its reference name and checks its shape.
func bindHead(c Config, find func(string) (*formats.Tensor, bool)) (*Head, error) {
	h, e := &Head{Config: c}, c.ExitDim
	get := func(dst *llama.Weight, name string, optional bool, shape ...int) error {
		w, ok, err := llama.LookupWeight(find, name, shape[len(shape)-1]) // MLX-quantized if it has .scales
		if !ok {
			if optional {
				return nil
			}
			return fmt.Errorf("tensor %q is missing", name)
		}
		if err != nil {
			return err
		}
		if !w.Shape.Equal(shape) {
			return fmt.Errorf("tensor %q has shape %v, the config implies %v", name, w.Shape, graph.Shape(shape))
		}
		if len(shape) == 1 {
			w = llama.ToF32(w) // biases feed f32-only ops
		}
		*dst = w
		return nil
	}
	hs := c.HiddenSize
	var errs []error
	if !c.RNN {
		// A head without the recurrence has no rnn_* tensors; one that has
		// them was trained with it, and running it without would draft
		// garbage rather than fail.
		for _, name := range []string{"rnn_w.weight", "rnn_u.weight"} {
			if _, ok := find(name); ok {
				return nil, fmt.Errorf("config.json says \"rnn\": false but the checkpoint holds %s, a recurrent head's weight: the config does not match the weights", name)
			}
		}
	}
	if c.RNN {
		errs = append(errs, get(&h.RnnW, "rnn_w.weight", false, hs, hs),
			get(&h.RnnU, "rnn_u.weight", false, hs, hs), get(&h.RnnUBias, "rnn_u.bias", false, hs))
	}
	if e != 2*hs {
		errs = append(errs, get(&h.InputProj, "input_proj.weight", false, e, 2*hs),
			get(&h.InputProjBias, "input_proj.bias", false, e))
	}
	h.Blocks = make([]Block, c.NumDraftLayers)
	for k := range h.Blocks {
		errs = append(errs, get(&h.Blocks[k].W, fmt.Sprintf("lm_head.%d.linear.weight", k), false, e, e),
			get(&h.Blocks[k].B, fmt.Sprintf("lm_head.%d.linear.bias", k), false, e))
	}
	errs = append(errs, get(&h.Vocab, fmt.Sprintf("lm_head.%d.weight", c.NumDraftLayers), false, c.VocabSize, e))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return h, nil
}

// Close releases the checkpoint's mapping.
func (h *Head) Close() error {
	if h.closer == nil {
		return nil
	}
	return h.closer()
}

// Check refuses a head that was not trained for an LLM of this shape.
func (h *Head) Check(llm llama.Config) error {
	switch {
	case h.Config.VocabSize != llm.Vocab:
		return fmt.Errorf("drafter: the draft head's vocabulary has %d tokens but the model's has %d", h.Config.VocabSize, llm.Vocab)
	case h.Config.HiddenSize != llm.Dim:
		return fmt.Errorf("drafter: the draft head expects hidden size %d but the model's is %d", h.Config.HiddenSize, llm.Dim)
	}
	return nil
}

// weights lists the head's tensors for binding.
func (h *Head) weights() []*llama.Weight {
	var ws []*llama.Weight
	for _, w := range []*llama.Weight{&h.RnnW, &h.RnnU, &h.RnnUBias, &h.InputProj, &h.InputProjBias, &h.Vocab} {
		if w.Present() {
			ws = append(ws, w)
		}
	}
	for k := range h.Blocks {
		ws = append(ws, &h.Blocks[k].W, &h.Blocks[k].B)
	}
	return ws
}
