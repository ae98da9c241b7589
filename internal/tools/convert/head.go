package convert

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// IsHead reports whether dir holds a ReDrafter draft head (its config.json
// says model_type "recurrent_drafting_drafter").
func IsHead(dir string) bool {
	raw, err := formats.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return false
	}
	var c struct {
		ModelType string `json:"model_type"`
	}
	return json.Unmarshal(raw, &c) == nil && c.ModelType == "recurrent_drafting_drafter"
}

// Head converts the draft head in directory in to directory out: its
// matrices (the RNN, input projection, residual blocks and the vocabulary
// projection, which dominates its size) quantized as opt says, its biases
// kept, and config.json with the quantization block added.
func Head(in, out string, opt Options) (Summary, error) {
	return HeadContext(context.Background(), in, out, opt)
}

// HeadContext is Head, stopped when ctx is done (as ModelContext is).
func HeadContext(ctx context.Context, in, out string, opt Options) (Summary, error) {
	if err := opt.check(); err != nil {
		return Summary{}, err
	}
	if err := checkNotInput(in, out); err != nil {
		return Summary{}, err
	}
	if err := checkOut(out, opt.Force); err != nil {
		return Summary{}, err
	}
	h, err := drafter.Load(in)
	if err != nil {
		return Summary{}, err
	}
	defer h.Close()
	ws := []*llama.Weight{&h.RnnW, &h.RnnU, &h.RnnUBias, &h.InputProj, &h.InputProjBias}
	for k := range h.Blocks {
		ws = append(ws, &h.Blocks[k].W, &h.Blocks[k].B)
	}
	ws = append(ws, &h.Vocab)
	src := h.Vocab.DType
	if h.Vocab.Quantized() {
		src = h.Vocab.Quant.Scales.DType
	}
	n := 0
	var matrices []string
	for _, w := range ws {
		if w.Present() {
			n++
			if len(w.Shape) == 2 {
				matrices = append(matrices, strings.TrimSuffix(w.Name, ".weight"))
			}
		}
	}
	if err := opt.checkKeep(matrices); err != nil {
		return Summary{}, err
	}
	e := newEncoder(&opt, src, n)
	for _, w := range ws {
		if !w.Present() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return Summary{}, fmt.Errorf("convert: %w", err)
		}
		v := values(*w)
		if len(w.Shape) == 1 {
			e.vector(w.Name, v, formatsDType(src))
			continue
		}
		alias := ""
		if w == &h.Vocab {
			alias = "vocab"
		}
		if err := e.matrix(strings.TrimSuffix(w.Name, ".weight"), alias, v, w.Shape[0], w.Shape[1]); err != nil {
			return Summary{}, err
		}
	}
	cfg, err := hfConfig(filepath.Join(in, "config.json"), e)
	if err != nil {
		return Summary{}, err
	}
	err = writeDir(ctx, out, opt.Force, func(dir string) error {
		if err := writeCheckpoint(ctx, dir, e.tensors); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		return os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	})
	return e.c.summary(), err
}
