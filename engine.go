package redrafter

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	// The CPU backend runs everywhere and is the reference: an app that
	// loads a model gets it without knowing backends exist. GPU backends
	// are opt-in imports (see the package doc).
	_ "github.com/seed9b8f47b1/redrafter/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/graph"
	"github.com/seed9b8f47b1/redrafter/model/drafter"
	"github.com/seed9b8f47b1/redrafter/model/llama"
	"github.com/seed9b8f47b1/redrafter/model/tokenizer"
)

// Options configure loading.
type Options struct {
	// Backend is "auto" (the default), "cpu", "metal" or "cuda".
	Backend string
	// Context caps the tokens a session can hold (0: the model's context).
	Context int
	// KVCache is the KV cache's element type: "f32", or "f16" (half the
	// memory; keys and values rounded to halves). "" is the backend's
	// default: f16 on the Metal GPU, f32 on the CPU.
	KVCache string
	// Logger receives progress and timings (nil: slog.Default()).
	Logger *slog.Logger
}

// Engine is a loaded model bound to a backend.
type Engine struct {
	// Tokenizer turns text into the model's token ids and back.
	Tokenizer tokenizer.Tokenizer
	// ChatTemplate is the model's own template text, if the checkpoint has one.
	ChatTemplate string
	// LoadTime is how long Load took.
	LoadTime time.Duration

	cfg     llama.Config
	be      graph.Backend
	ckpt    *llama.Checkpoint
	runner  *llama.Runner
	drafter *drafter.Drafter
	// draftSource proposes beams: the drafter, or a test's stand-in.
	draftSource beamSource
	context     int
	log         *slog.Logger
}

// Load opens a model: a .gguf file or an HF checkpoint directory.
func Load(path string, opts Options) (*Engine, error) {
	start := time.Now()
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	name := opts.Backend
	if name == "" {
		name = "auto"
	}
	be, err := graph.Open(name)
	if err != nil {
		return nil, err
	}
	ck, err := llama.Open(path)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: ck.Model.Config, be: be, ckpt: ck, log: log}
	fail := func(err error) (*Engine, error) {
		e.Close()
		return nil, err
	}
	var vocab *tokenizer.Vocab
	if ck.Meta != nil {
		vocab, err = tokenizer.FromGGUFMetadata(ck.Meta)
	} else {
		vocab, err = tokenizer.LoadHF(ck.Dir)
		if err != nil {
			// Llama-2 style checkpoints may ship only tokenizer.model.
			if v, err2 := tokenizer.LoadSentencePiece(filepath.Join(ck.Dir, "tokenizer.model")); err2 == nil {
				vocab, err = v, nil
			}
		}
	}
	if err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	if len(vocab.Tokens) > e.cfg.Vocab {
		return fail(fmt.Errorf("%s: the tokenizer has %d tokens but the model only %d", path, len(vocab.Tokens), e.cfg.Vocab))
	}
	if e.Tokenizer, err = tokenizer.New(vocab); err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	e.ChatTemplate = vocab.ChatTemplate
	if e.runner, err = llama.Bind(ck.Model, be); err != nil {
		return fail(err)
	}
	switch opts.KVCache {
	case "":
		if d, ok := be.(interface{ DefaultKVCache() graph.DType }); ok {
			e.runner.KVCache = d.DefaultKVCache()
		}
	case "f32":
	case "f16":
		e.runner.KVCache = graph.F16
	default:
		return fail(fmt.Errorf("KV cache type %q: want f32 or f16", opts.KVCache))
	}
	e.context = e.cfg.Context
	if opts.Context > 0 && opts.Context < e.context {
		e.context = opts.Context
	}
	if err := e.fitContext(opts.Context > 0); err != nil {
		return fail(err)
	}
	e.LoadTime = time.Since(start)
	log.Debug("model loaded", "path", path, "arch", e.cfg.Arch, "backend", be.Name(),
		"layers", e.cfg.Layers, "dim", e.cfg.Dim, "vocab", e.cfg.Vocab, "load_ms", e.LoadTime.Milliseconds())
	return e, nil
}

// fitContext caps the context to the KV cache a GPU backend can hold (the
// Metal backend's budget against its recommended working set): a session
// allocates its whole cache up front. A context the caller chose is kept,
// with a warning, unless not even a small cache fits.
func (e *Engine) fitContext(chosen bool) error {
	s, ok := e.be.(interface {
		KVContext(want int, bytesPerToken int64) (int, error)
	})
	if !ok {
		return nil
	}
	elem := int64(4)
	if e.runner.KVCache == graph.F16 {
		elem = 2
	}
	c := e.cfg
	fits, err := s.KVContext(e.context, 2*int64(c.Layers)*int64(c.KVHeads)*int64(c.HeadDim)*elem)
	switch {
	case err == nil:
	case fits == 0:
		return err
	case chosen:
		e.log.Warn("the KV cache may not fit the GPU", "context", e.context, "err", err)
	default:
		e.log.Warn(err.Error()+" (a smaller context, or an f16 cache, leaves more)", "model_context", c.Context)
		e.context = fits
	}
	return nil
}

// Context is the number of tokens a session can hold.
func (e *Engine) Context() int { return e.context }

// ModelInfo describes a loaded model.
type ModelInfo struct {
	Arch    string // "llama", "mistral" or "qwen2"
	Vocab   int    // vocabulary size
	Dim     int    // hidden size
	FFN     int    // intermediate size of the MLP
	Layers  int    // transformer blocks
	Heads   int    // query heads
	KVHeads int    // key/value heads
	HeadDim int    // per-head dimension
	// TrainedContext is the context the model was trained for; the engine's
	// own (Context) may be smaller.
	TrainedContext int
	// KVCache is the KV cache's element type, "f32" or "f16".
	KVCache string
}

// Model describes the loaded model.
func (e *Engine) Model() ModelInfo {
	c := e.cfg
	kv := "f32"
	if e.runner != nil && e.runner.KVCache == graph.F16 {
		kv = "f16"
	}
	return ModelInfo{Arch: c.Arch, Vocab: c.Vocab, Dim: c.Dim, FFN: c.FFN, Layers: c.Layers, Heads: c.Heads,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, TrainedContext: c.Context, KVCache: kv}
}

// Backend is the name of the backend the engine runs on ("cpu", "metal", ...).
func (e *Engine) Backend() string { return e.be.Name() }

// Embeddings returns float32 copies of the token embedding table and the
// output projection, both [vocab, dim] row-major (quantized weights are
// dequantized). The draft-head trainer needs them: a draft head embeds
// tokens with the model's table, and distillation targets come through the
// model's output projection.
func (e *Engine) Embeddings() (embed, output []float32, err error) {
	if e.ckpt == nil {
		return nil, nil, errors.New("redrafter: the engine is closed")
	}
	m := e.ckpt.Model
	return llama.F32Values(m.Embed), llama.F32Values(m.Output), nil
}

// Close releases the model and its mapping.
func (e *Engine) Close() error {
	if e.drafter != nil {
		e.drafter.Close()
		e.drafter.Head.Close()
		e.drafter, e.draftSource = nil, nil
	}
	if e.runner != nil {
		e.runner.Close()
		e.runner = nil
	}
	var err error
	if e.ckpt != nil {
		err = e.ckpt.Close()
		e.ckpt = nil
	}
	if c, ok := e.be.(interface{ Close() error }); ok {
		err = errors.Join(err, c.Close())
	}
	return err
}
