package redrafter

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	// The CPU backend runs everywhere and is the reference: an app that
	// loads a model gets it without knowing backends exist. GPU backends
	// are opt-in imports (see the package doc).
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// Options configure loading.
type Options struct {
	// Backend is "auto" (the default), "cpu", "metal" or "cuda".
	Backend string
	// Context caps the tokens a session can hold (0: the model's context;
	// more than the model's is capped to it; negative is an error).
	Context int
	// KVCache is the KV cache's element type: "f32", or "f16" (half the
	// memory; keys and values rounded to halves). "" is the backend's
	// default: f16 on the Metal GPU, f32 on the CPU.
	KVCache string
	// Threads is the number of worker goroutines of the CPU backend (0:
	// GOMAXPROCS, all cores by default; more than 4 per core is an error).
	// GPU backends ignore it.
	Threads int
	// Logger receives progress and timings (nil: slog.Default()).
	Logger *slog.Logger
}

// maxThreads bounds Options.Threads: more workers than this only add
// scheduling overhead, and a huge number exhausts the OS's threads.
func maxThreads() int { return 4 * runtime.NumCPU() }

// Engine is a loaded model bound to a backend.
type Engine struct {
	// ChatTemplate is the model's own template text, if the checkpoint has one.
	ChatTemplate string
	// LoadTime is how long Load took.
	LoadTime time.Duration

	cfg     llama.Config
	tok     tokenizer.Tokenizer
	be      graph.Backend
	ckpt    *llama.Checkpoint
	runner  *llama.Runner
	drafter *drafter.Drafter
	// draftSource proposes beams: the drafter, or a test's stand-in.
	draftSource beamSource
	context     int
	decodeBytes int64 // weight bytes a decode step reads (llama.Model.DecodeBytes)
	// jinja is the model's own chat template compiled, or jinjaErr why it
	// does not compile; both nil when the checkpoint has none.
	jinja    *tokenizer.Template
	jinjaErr error
	// addBOS: the vocabulary asks for BOS at the start of a prompt.
	addBOS bool
	// stops are ids besides EOS and control tokens that end a reply: the
	// GGUF's end-of-turn ids, generation_config.json's eos_token_id.
	stops map[int32]bool
	// sampling is generation_config.json's recommendation (DefaultSampling).
	sampling *Sampling
	// now is the clock of templates' strftime_now (nil: time.Now).
	now func() time.Time
	log *slog.Logger

	mu         sync.Mutex
	closed     bool
	generating map[*Session]chan struct{} // sessions generating, and when each ends
}

// minTokenizerCover is the share of the embedding rows, in percent, that the
// tokenizer must name.
const minTokenizerCover = 99

// Load opens a model: a .gguf file or an HF checkpoint directory.
func Load(path string, opts Options) (*Engine, error) {
	start := time.Now()
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Context < 0 {
		return nil, fmt.Errorf("redrafter: context %d: want 0 (the model's) or more", opts.Context)
	}
	if opts.Threads < 0 || opts.Threads > maxThreads() {
		return nil, fmt.Errorf("redrafter: threads %d: want 1 to %d (4× the %d CPUs), or 0 for all cores", opts.Threads, maxThreads(), runtime.NumCPU())
	}
	be, err := openBackend(opts.Backend, opts.Threads)
	if err != nil {
		return nil, err
	}
	ck, err := llama.Open(path)
	if err != nil {
		return nil, err
	}
	if ck.Ignored != "" {
		log.Info(ck.Ignored, "model", path)
	}
	e := &Engine{cfg: ck.Model.Config, be: be, ckpt: ck, log: log, generating: map[*Session]chan struct{}{}}
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
	// Embedding tables are often padded past the tokenizer (Qwen2 adds
	// 0.2%), but a tokenizer that covers much less than the table is
	// another model's: the tokens it lacks would decode to nothing.
	switch n := len(vocab.Tokens); {
	case n > e.cfg.Vocab:
		return fail(fmt.Errorf("%s: the tokenizer has %d tokens but the model only %d", path, n, e.cfg.Vocab))
	case n*100 < e.cfg.Vocab*minTokenizerCover:
		return fail(fmt.Errorf("%s: the tokenizer has %d tokens for the model's %d embedding rows: it belongs to another model", path, n, e.cfg.Vocab))
	}
	if e.tok, err = tokenizer.New(vocab); err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	if vocab.ChatTemplate == "" && ck.Dir != "" {
		// A checkpoint with only tokenizer.model may still have its template
		// (in tokenizer_config.json or a template file).
		if vocab.ChatTemplate, err = tokenizer.ReadChatTemplate(ck.Dir); err != nil {
			return fail(fmt.Errorf("%s: %w", path, err))
		}
	}
	e.ChatTemplate = vocab.ChatTemplate
	e.addBOS = vocab.AddBOS
	e.stops = map[int32]bool{}
	for _, id := range vocab.EndOfTurn {
		e.stops[id] = true
	}
	if ck.Dir != "" {
		gc, err := readGenerationConfig(ck.Dir, len(vocab.Tokens))
		if err != nil {
			return fail(fmt.Errorf("%s: %w", path, err))
		}
		for _, id := range gc.eos {
			e.stops[id] = true
		}
		e.sampling = gc.sampling
	}
	if strings.TrimSpace(vocab.ChatTemplate) != "" {
		// A template that does not compile fails the chats that would use
		// it, not the load: a built-in template or plain generation still work.
		e.jinja, e.jinjaErr = tokenizer.CompileTemplate(vocab.ChatTemplate)
	}
	var computed func(q *llama.Quant) bool
	if c, ok := be.(interface {
		ComputesSymmetricBiases(bits, groupSize, k int, scales graph.DType) bool
	}); ok {
		computed = func(q *llama.Quant) bool {
			return len(q.Scales.Shape) == 2 && c.ComputesSymmetricBiases(q.Bits, q.GroupSize, q.Scales.Shape[1]*q.GroupSize, q.Scales.DType)
		}
	}
	if e.runner, err = llama.Bind(ck.Model, be); err != nil {
		return fail(err)
	}
	// The runner's model: its block weights as this backend runs them.
	e.decodeBytes = e.runner.Model.DecodeBytes(computed)
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
	if e.context, err = e.fitContext(opts.Context); err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	// Longrope picks its frequencies by the context run with (llama.cpp's
	// rule; internal/model/llama/rope.go).
	e.runner.UseContext(e.context)
	e.LoadTime = time.Since(start)
	log.Debug("model loaded", "path", path, "arch", e.cfg.Arch, "backend", be.Name(),
		"layers", e.cfg.Layers, "dim", e.cfg.Dim, "vocab", e.cfg.Vocab, "load_ms", e.LoadTime.Milliseconds())
	return e, nil
}

// openBackend opens the named backend ("" is "auto"); a CPU backend, named
// or picked by "auto", gets threads workers (0: GOMAXPROCS).
func openBackend(name string, threads int) (graph.Backend, error) {
	switch {
	case name == "cpu" && threads > 0:
		return cpu.New(threads), nil
	case name == "":
		name = "auto"
	}
	be, err := graph.Open(name)
	if err != nil || threads == 0 || be.Name() != "cpu" {
		return be, err
	}
	// auto picked the CPU, with its default workers.
	if c, ok := be.(interface{ Close() error }); ok {
		c.Close()
	}
	return cpu.New(threads), nil
}

// fitContext picks the tokens a session holds: the model's context, or the
// smaller one asked for, such that one session's KV cache (allocated whole
// when the session opens) fits in what the backend can hold.
//
// A GPU backend that budgets its KV cache (Metal: its recommended working
// set less the weights and a reserve; the KVContext method) caps the
// model's context to its budget with a warning; a context asked for is kept,
// with a warning, since the working set is a recommendation; it is an error
// only when not even a small cache fits. Other backends are checked against
// graph.MemoryLimiter (the CPU: physical memory): the model's context is
// lowered to what fits in half of it (the weights and other sessions need
// the rest), with a warning; a context asked for that cannot fit at all is
// an error.
func (e *Engine) fitContext(asked int) (int, error) {
	n := e.cfg.Context
	if asked > 0 && asked < n {
		n = asked
	}
	need, err := e.runner.KVBytes(n)
	if err != nil {
		return 0, err
	}
	perToken, err := e.runner.KVBytes(1)
	if err != nil {
		return 0, err
	}
	if s, ok := e.be.(interface {
		KVContext(want int, bytesPerToken int64) (int, error)
	}); ok {
		fits, err := s.KVContext(n, perToken)
		switch {
		case err == nil:
		case fits == 0:
			return 0, err
		case asked > 0:
			e.log.Warn("the KV cache may not fit the GPU", "context", n, "err", err)
		default:
			e.log.Warn(err.Error()+" (a smaller context, or an f16 cache, leaves more)", "model_context", e.cfg.Context)
			n = fits
		}
		return n, nil
	}
	limit := e.runner.MemoryLimit()
	switch {
	case limit <= 0:
		return n, nil
	case asked > 0:
		if need > limit {
			return 0, fmt.Errorf("a context of %d tokens needs a %.1f GiB KV cache, more than the %.1f GiB the %s backend can hold",
				n, gib(need), gib(limit), e.be.Name())
		}
		return n, nil
	case need <= limit/2:
		return n, nil
	}
	fits := int(limit / 2 / perToken)
	if fits >= contextStep {
		fits -= fits % contextStep
	}
	if fits < 1 {
		return 0, fmt.Errorf("one token's KV cache (%d bytes) does not fit in the %s backend", perToken, e.be.Name())
	}
	e.log.Warn("the model's context does not fit in memory: using a smaller one (set the context to choose)",
		"model_context", e.cfg.Context, "kv_cache_gib", fmt.Sprintf("%.1f", gib(need)), "context", fits,
		"memory_gib", fmt.Sprintf("%.1f", gib(limit)))
	return fits, nil
}

// contextStep rounds a context lowered to fit memory.
const contextStep = 1024

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// Context is the number of tokens a session can hold.
func (e *Engine) Context() int { return e.context }

// ModelInfo describes a loaded model.
type ModelInfo struct {
	Arch    string // "llama", "mistral", "qwen2" or "qwen3"
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
	// Template is the chat template Chat uses by default: "model" when the
	// checkpoint has its own (Engine.ChatTemplate), "" when it has none, and
	// Chat then uses vicuna.
	Template string
}

// Model describes the loaded model.
func (e *Engine) Model() ModelInfo {
	c := e.cfg
	kv := "f32"
	if e.runner != nil && e.runner.KVCache == graph.F16 {
		kv = "f16"
	}
	return ModelInfo{Arch: c.Arch, Vocab: c.Vocab, Dim: c.Dim, FFN: c.FFN, Layers: c.Layers, Heads: c.Heads,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, TrainedContext: c.Context, KVCache: kv,
		Template: e.defaultTemplate()}
}

func (e *Engine) defaultTemplate() string {
	if strings.TrimSpace(e.ChatTemplate) != "" {
		return TemplateModel
	}
	return ""
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// Backend is the name of the backend the engine runs on ("cpu", "metal", ...).
func (e *Engine) Backend() string { return e.be.Name() }

// Close releases the model and its mapping. Generations running on other
// goroutines are ended first (they return ErrClosed) and waited for, so
// Close must not be called from a generation's own onText. Later calls of
// the engine's methods, and of its sessions', return ErrClosed; closing
// again does nothing. Close the sessions too (their caches are theirs).
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	var running []chan struct{}
	for s, done := range e.generating {
		s.cancel(ErrClosed)
		running = append(running, done)
	}
	e.mu.Unlock()
	for _, done := range running {
		<-done
	}
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
