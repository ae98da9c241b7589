package redrafter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// generationConfig is what Load reads from an HF checkpoint's
// generation_config.json: the ids that end a reply and the sampling the
// model's authors recommend.
type generationConfig struct {
	eos      []int32
	sampling *Sampling // nil: none recommended (no do_sample: true)
}

// readGenerationConfig reads dir/generation_config.json; a checkpoint
// without one has the zero config. eos_token_id may be one id or a list
// (Llama 3.1: 128001, 128008, 128009). Sampling follows transformers: only
// with do_sample true, and temperature, top_p and top_k default to
// GenerationConfig's 1.0, 1.0 and 50.
func readGenerationConfig(dir string, vocab int) (generationConfig, error) {
	path := filepath.Join(dir, "generation_config.json")
	data, err := formats.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return generationConfig{}, nil
	case err != nil:
		return generationConfig{}, err
	}
	var c struct {
		EOS         json.RawMessage `json:"eos_token_id"`
		DoSample    bool            `json:"do_sample"`
		Temperature *float32        `json:"temperature"`
		TopP        *float32        `json:"top_p"`
		TopK        *int            `json:"top_k"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return generationConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	var g generationConfig
	if len(c.EOS) > 0 && string(c.EOS) != "null" {
		var one int64
		var list []int64
		if err := json.Unmarshal(c.EOS, &one); err == nil {
			list = []int64{one}
		} else if err := json.Unmarshal(c.EOS, &list); err != nil {
			return generationConfig{}, fmt.Errorf("%s: eos_token_id: want an id or a list of ids", path)
		}
		for _, id := range list {
			if id < 0 || id >= int64(vocab) {
				return generationConfig{}, fmt.Errorf("%s: eos_token_id %d: out of the vocabulary's %d ids", path, id, vocab)
			}
			g.eos = append(g.eos, int32(id))
		}
	}
	if c.DoSample {
		s := Sampling{Temperature: 1, TopP: 1, TopPSet: true, TopK: 50}
		if c.Temperature != nil {
			s.Temperature = *c.Temperature
		}
		if c.TopP != nil {
			s.TopP = *c.TopP
		}
		if c.TopK != nil {
			s.TopK = *c.TopK
		}
		if err := s.params().Validate(); err != nil {
			return generationConfig{}, fmt.Errorf("%s: %w", path, err)
		}
		g.sampling = &s
	}
	return g, nil
}

// DefaultSampling is the sampling the model's generation_config.json
// recommends (transformers' reading: do_sample true, and temperature,
// top_p, top_k, where absent 1.0, 1.0 and 50), and whether it has one. It
// is never applied by itself: GenerateOptions.Sampling is what a caller
// sets; the CLI uses this for the flags the user did not give.
func (e *Engine) DefaultSampling() (Sampling, bool) {
	if e.sampling == nil {
		return Sampling{}, false
	}
	return *e.sampling, true
}
