package drafter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// NewRandom returns a head with f32 weights drawn like PyTorch's default
// Linear initialisation (uniform in ±1/sqrt(fan_in)), the starting point of
// training and the stand-in for a real head in tests.
func NewRandom(c Config, seed uint64) *Head {
	if c.ExitDim == 0 {
		c.ExitDim = 2 * c.HiddenSize
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	mk := func(name string, fanIn int, shape ...int) llama.Weight {
		v := make([]float32, graph.Shape(shape).Numel())
		bound := 1 / math.Sqrt(float64(fanIn))
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * bound)
		}
		return llama.Weight{Name: name, DType: graph.F32, Shape: shape, Data: graph.AsBytes(v)}
	}
	h, e := &Head{Config: c}, c.ExitDim
	if c.RNN {
		h.RnnW = mk("rnn_w.weight", c.HiddenSize, c.HiddenSize, c.HiddenSize)
		h.RnnU = mk("rnn_u.weight", c.HiddenSize, c.HiddenSize, c.HiddenSize)
		h.RnnUBias = mk("rnn_u.bias", c.HiddenSize, c.HiddenSize)
	}
	if e != 2*c.HiddenSize {
		h.InputProj = mk("input_proj.weight", 2*c.HiddenSize, e, 2*c.HiddenSize)
		h.InputProjBias = mk("input_proj.bias", 2*c.HiddenSize, e)
	}
	h.Blocks = make([]Block, c.NumDraftLayers)
	for k := range h.Blocks {
		h.Blocks[k] = Block{W: mk(fmt.Sprintf("lm_head.%d.linear.weight", k), e, e, e),
			B: mk(fmt.Sprintf("lm_head.%d.linear.bias", k), e, e)}
	}
	h.Vocab = mk(fmt.Sprintf("lm_head.%d.weight", c.NumDraftLayers), e, c.VocabSize, e)
	return h
}

// Save writes the head in the reference layout: config.json and
// model.safetensors in dir (created if needed). The files are written under
// temporary names and renamed, so an interrupted save leaves the previous
// checkpoint intact.
func (h *Head) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("drafter: %w", err)
	}
	c := h.Config
	if c.ModelType == "" {
		c.ModelType = "recurrent_drafting_drafter"
	}
	cfg, err := json.MarshalIndent(struct {
		Architectures []string `json:"architectures"`
		Config
	}{[]string{"Drafter"}, c}, "", "  ")
	if err != nil {
		return err
	}
	var ts []formats.Tensor
	for _, w := range h.weights() {
		dt := map[graph.DType]formats.DType{graph.F32: formats.F32, graph.F16: formats.F16, graph.BF16: formats.BF16}[w.DType]
		ts = append(ts, formats.Tensor{Name: w.Name, DType: dt, Shape: w.Shape, Data: w.Data})
	}
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("drafter: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"model.safetensors", buf.Bytes()}, {"config.json", append(cfg, '\n')}} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, 0o644); err != nil {
			return fmt.Errorf("drafter: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return fmt.Errorf("drafter: %w", err)
		}
	}
	return nil
}
