package redrafter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
	"github.com/seed9b8f47b1/redrafter/internal/sample"
)

// GenerateOptions control one generation.
type GenerateOptions struct {
	MaxTokens int          // stop after this many new tokens (0: until the context is full)
	Sampling  Sampling     // zero value: greedy
	Seed      uint64       // seeds sampling; the same seed gives the same text
	Stop      []string     // end the text before the earliest occurrence of any of these
	NoBOS     bool         // do not prepend the BOS token to the prompt
	Draft     DraftOptions // speculative decoding, when the engine has a draft head
	// ParseSpecial makes special-token text in the prompt (such as
	// "<|im_start|>" rendered by a chat template) encode as those tokens.
	ParseSpecial bool
}

// Sampling selects the distribution tokens are drawn from. The zero value
// is greedy decoding (the most likely token, always).
type Sampling struct {
	// Temperature divides the logits. 0 means greedy; negative, NaN or
	// infinite is an error.
	Temperature float32
	// TopK keeps the K largest logits; 0 (or K >= vocabulary size) keeps all.
	// As in transformers, logits tied with the K-th largest are kept too, so
	// more than K tokens can survive. Negative is an error.
	TopK int
	// TopP keeps the smallest set of most probable tokens whose mass is at
	// least TopP (at least one token); 1 keeps all. 0 is "not set", all
	// tokens, unless TopPSet: then it keeps only the most probable token,
	// as OpenAI's top_p 0 does. Outside [0, 1] is an error.
	TopP float32
	// TopPSet says that TopP was given, so that a TopP of 0 means 0: the
	// most probable token alone (ties to the lowest id), which is greedy
	// decoding's token. The CLI, the server and the C library set it.
	TopPSet bool
}

// Greedy reports whether p means greedy (argmax) decoding.
func (p Sampling) Greedy() bool { return p.params().Greedy() }

// params is p as the sampler takes it. The sampler's TopP 0 is off; a TopP
// of 0 that was set is the nucleus's limit as its mass goes to 0, the most
// probable token alone, which the least positive TopP gives.
func (p Sampling) params() sample.Params {
	topP := p.TopP
	if topP == 0 && p.TopPSet {
		topP = math.SmallestNonzeroFloat32
	}
	return sample.Params{Temperature: p.Temperature, TopK: p.TopK, TopP: topP}
}

// StopReason says why a generation ended.
type StopReason string

// Stop reasons.
const (
	StopEOS      StopReason = "eos"      // the model ended the text
	StopString   StopReason = "stop"     // a stop string was produced
	StopLength   StopReason = "length"   // MaxTokens or the context was reached
	StopCanceled StopReason = "canceled" // the context was cancelled (a partial Result)
	StopError    StopReason = "error"    // an error ended the generation (a partial Result)
)

// validate refuses options that have no meaning, before any work.
func (o GenerateOptions) validate() error {
	if o.MaxTokens < 0 {
		return fmt.Errorf("redrafter: MaxTokens %d: want 0 (until the context is full) or more", o.MaxTokens)
	}
	if err := o.Sampling.params().Validate(); err != nil {
		return fmt.Errorf("redrafter: %w", err)
	}
	return nil
}

// Result is what a generation produced.
type Result struct {
	Text   string
	Tokens []int32    // generated token ids
	Reason StopReason // why it ended
	Stats  Stats
}

// Stats are timings and counts of one generation.
type Stats struct {
	PromptTokens    int // tokens the prefill had to run (after reusing a session's cache)
	GeneratedTokens int
	Prefill         time.Duration
	Decode          time.Duration
	// Draft is the ReDrafter ledger (nil for autoregressive decoding), with
	// the beam shape it used.
	Draft                 *DraftStats
	BeamWidth, BeamLength int
}

// PrefillRate is prompt tokens per second.
func (s Stats) PrefillRate() float64 { return rate(s.PromptTokens, s.Prefill) }

// DecodeRate is generated tokens per second.
func (s Stats) DecodeRate() float64 { return rate(s.GeneratedTokens, s.Decode) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate runs prompt through a fresh session. onText receives the text as
// it is produced, in pieces that never split a UTF-8 character or a stop
// string; an error from it ends the generation with that error. A model
// whose logits hold NaN or Inf (broken weights) ends it with a
// *NonFiniteError that names the value and the token's position.
//
// Options without meaning (MaxTokens < 0, see Sampling) are
// an error before any work. Once the prompt is accepted, an error (ctx's
// cancellation among them) comes with the partial Result: the tokens and
// text delivered so far, their stats, and Reason StopCanceled or StopError.
func (e *Engine) Generate(ctx context.Context, prompt string, opt GenerateOptions, onText func(string) error) (*Result, error) {
	s, err := e.NewSession()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Generate(ctx, prompt, opt, onText)
}

// Session is one sequence with its KV cache. Successive Generate calls
// reuse the cached keys and values of the longest common token prefix, so a
// chat that re-renders the whole conversation each turn only runs the new
// part.
//
// A session generates on one goroutine at a time (a second Generate or
// Chat while one runs is an error). Close, and its Engine's Close, may come
// from any goroutine, during a generation too: they end it (it returns
// ErrClosed) and wait for it before they free anything.
type Session struct {
	e      *Engine
	state  *llama.State
	tokens []int32   // the tokens whose keys and values are cached
	logits []float32 // [vocab] after the last cached token
	hidden []float32 // [dim] final-norm hidden state of the last cached token
	reused int       // tokens of the last prompt found in the cache
	group  *Group    // the group whose passes it shares, or nil

	// Guarded by e.mu.
	closed bool                    // Close has begun
	cancel context.CancelCauseFunc // ends the generation running, if any
	done   chan struct{}           // closed when that generation returns
}

// NewSession allocates a KV cache of Engine.Context() tokens.
func (e *Engine) NewSession() (*Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock() // Close waits: the runner stays until the state is made
	if e.closed {
		return nil, ErrClosed
	}
	st, err := e.runner.NewState(e.context)
	if err != nil {
		return nil, err
	}
	return &Session{e: e, state: st, logits: make([]float32, e.cfg.Vocab), hidden: make([]float32, e.cfg.Dim)}, nil
}

// Close frees the session's cache. A generation running on another
// goroutine is ended first (it returns ErrClosed) and waited for, so Close
// must not be called from that generation's own onText. Closing twice is
// harmless.
func (s *Session) Close() {
	e := s.e
	e.mu.Lock()
	s.closed = true
	done := s.done
	if s.cancel != nil {
		s.cancel(ErrClosed)
	}
	e.mu.Unlock()
	if done != nil {
		<-done
	}
	e.mu.Lock()
	st := s.state
	s.state, s.tokens = nil, nil
	e.mu.Unlock()
	if st != nil {
		if s.group != nil {
			s.group.forget(st)
		}
		st.Close()
	}
}

// begin marks the start of a generation: it refuses a closed session or
// engine and a session already generating, and returns the context the
// generation runs under, which Close cancels with ErrClosed as its cause.
// end must be called when the generation returns.
func (s *Session) begin(ctx context.Context) (context.Context, func(), error) {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case s.closed || s.state == nil || e.closed:
		return nil, nil, ErrClosed
	case s.done != nil:
		return nil, nil, errors.New("redrafter: the session is already generating (one generation at a time per session)")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	e.generating[s] = done
	end := func() {
		cancel(nil)
		e.mu.Lock()
		s.cancel, s.done = nil, nil
		delete(e.generating, s)
		e.mu.Unlock()
		close(done)
	}
	return ctx, end, nil
}

// Tokens returns a copy of the tokens currently cached.
func (s *Session) Tokens() []int32 { return slices.Clone(s.tokens) }

// Generate continues the session with prompt; see Engine.Generate.
func (s *Session) Generate(ctx context.Context, prompt string, opt GenerateOptions, onText func(string) error) (*Result, error) {
	e := s.e
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	if err := opt.validate(); err != nil {
		return nil, err
	}
	var ids []int32
	if opt.ParseSpecial {
		ids = e.tok.EncodeSpecial(prompt, !opt.NoBOS)
	} else {
		ids = e.tok.Encode(prompt, !opt.NoBOS)
	}
	return s.generate(ctx, ids, opt, onText)
}

// generate continues the session with the prompt's ids (Generate, Chat),
// between begin and its end.
func (s *Session) generate(ctx context.Context, ids []int32, opt GenerateOptions, onText func(string) error) (*Result, error) {
	e := s.e
	tok := e.tok
	if len(ids) == 0 {
		return nil, errors.New("redrafter: the prompt is empty and the model has no BOS token")
	}
	if len(ids) >= s.state.Cap() {
		return nil, fmt.Errorf("redrafter: the prompt is %d tokens, which leaves no room in the context of %d", len(ids), s.state.Cap())
	}
	spec, err := e.draftPlan(opt.Draft)
	if err != nil {
		return nil, err
	}
	if s.group != nil {
		s.group.join(s)
		defer s.group.leave(s)
	}
	res := &Result{Reason: StopLength}
	em := &emitter{res: res, tok: tok, stops: e.stops, max: opt.MaxTokens, out: newStopWriter(tok, ids, opt.Stop, onText)}
	// partial ends the generation with err and what it produced so far.
	var decodeStart time.Time
	partial := func(err error) (*Result, error) {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrClosed) {
			err = ErrClosed // Session.Close or Engine.Close ended it
		}
		res.Reason = StopError
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			res.Reason = StopCanceled
		}
		res.Text = em.out.text.String()
		res.Stats.GeneratedTokens = len(res.Tokens)
		if !decodeStart.IsZero() {
			res.Stats.Decode = time.Since(decodeStart)
		}
		return res, publicError(err)
	}
	start := time.Now()
	err = s.prefill(ctx, ids)
	res.Stats.PromptTokens = max(0, len(s.tokens)-s.reused)
	res.Stats.Prefill = time.Since(start)
	if err != nil {
		return partial(err)
	}

	decodeStart = time.Now()
	d := &decoder{s: s, opt: opt, em: em, rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15))}
	if spec != nil {
		err = d.speculative(ctx, spec)
	} else {
		err = d.autoregressive(ctx)
	}
	if err == nil {
		var stopped bool
		if stopped, err = em.out.flush(); stopped {
			res.Reason = StopString
		}
	}
	if err != nil {
		return partial(err)
	}
	res.Text = em.out.text.String()
	res.Stats.GeneratedTokens = len(res.Tokens)
	res.Stats.Decode = time.Since(decodeStart)
	return res, nil
}

// emitter applies the stop rules to each token the model decides.
type emitter struct {
	res   *Result
	tok   tokenizer.Tokenizer
	stops map[int32]bool // the model's end-of-turn ids (Engine.stops)
	max   int
	out   *stopWriter
}

// push adds one decided token and reports whether generation is over.
// Any control token ends the text: EOS, a BOS that starts a new document,
// and end-of-turn markers such as Llama 3's <|eot_id|> or ChatML's <|im_end|>;
// so do the ids the model's metadata names as ending a turn, whatever their
// type (GGUF eot_token_id, generation_config.json's eos_token_id).
func (em *emitter) push(id int32) (bool, error) {
	if id == em.tok.EOS() || id == em.tok.BOS() || em.tok.IsControl(id) || em.stops[id] {
		em.res.Reason = StopEOS
		return true, nil
	}
	em.res.Tokens = append(em.res.Tokens, id)
	stopped, err := em.out.add(id)
	if err != nil {
		return true, err
	}
	if stopped {
		em.res.Reason = StopString
		return true, nil
	}
	return em.max > 0 && len(em.res.Tokens) >= em.max, nil
}

// decoder is one generation's decoding loop.
type decoder struct {
	s     *Session
	opt   GenerateOptions
	em    *emitter
	rng   *rand.Rand
	probs []float64
}

// pick chooses the next token from logits: argmax, or a draw from the
// sampling distribution. The logits are finite (llama.State.Forward checks
// them as it reads them back); an error here would be a distribution that
// filtering left empty.
func (d *decoder) pick(logits []float32) (int32, error) {
	if d.opt.Sampling.Greedy() {
		return sample.Argmax(logits), nil
	}
	if len(d.probs) != len(logits) {
		d.probs = make([]float64, len(logits))
	}
	if err := sample.Probs(d.probs, logits, d.opt.Sampling.params()); err != nil {
		return 0, fmt.Errorf("redrafter: after position %d: %w", d.s.state.Len()-1, err)
	}
	return sample.Draw(d.probs, d.rng), nil
}

// autoregressive decodes one token per forward pass.
func (d *decoder) autoregressive(ctx context.Context) error {
	s := d.s
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		next, err := d.pick(s.logits)
		if err != nil {
			return err
		}
		if done, err := d.em.push(next); done || err != nil {
			return err
		}
		if s.state.Len()+1 >= s.state.Cap() {
			return nil // the context is full
		}
		if err := s.forward([]int32{next}); err != nil {
			return err
		}
	}
}

// forward runs a chain of tokens, keeps their cache entries and leaves the
// last token's logits in s.logits and its final-norm hidden state in s.hidden.
func (s *Session) forward(ids []int32) error {
	if err := s.run(llama.Chain(ids, false), s.logits, s.hidden); err != nil {
		return err
	}
	s.state.Advance(len(ids))
	s.tokens = append(s.tokens, ids...)
	return nil
}

// prefill brings the cache to ids, reusing the longest cached prefix, and
// leaves the last token's logits in s.logits. The rest runs in chunks whose
// sizes are powers of two, so a handful of compiled plans serve any prompt.
func (s *Session) prefill(ctx context.Context, ids []int32) error {
	p := 0
	for p < len(ids) && p < len(s.tokens) && ids[p] == s.tokens[p] {
		p++
	}
	if p == len(ids) {
		p-- // the last token must run to give logits
	}
	s.state.Trim(p)
	s.tokens = s.tokens[:p]
	s.reused = p
	for rest := ids[p:]; len(rest) > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := 1
		for n*2 <= len(rest) && n < s.maxChunk() {
			n *= 2
		}
		if err := s.forward(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

const maxChunk = 256

// groupChunk caps a prefill chunk in a Group on backends whose rows do not
// depend on the batch (the CPU), so that a long prompt holds the other
// members' passes for a short chunk at a time; chunking does not change
// a bit there. Elsewhere a chunk is what it would be alone (Metal's matmul
// rounds differently above its matvec rows, and a large chunk runs alone).
const groupChunk = 32

func (s *Session) maxChunk() int {
	if s.group == nil {
		return maxChunk
	}
	if _, bounded := s.e.be.(llama.InvariantRower); bounded {
		return maxChunk
	}
	return groupChunk
}

// run is a forward pass of s's State, alone or in its group's next pass.
func (s *Session) run(b llama.Batch, logits, hidden []float32) error {
	if s.group != nil {
		return s.group.forward(s, b, logits, hidden)
	}
	return s.state.Forward(b, logits, hidden)
}

// stopWriter streams decoded text, holding back anything that could still
// become a stop string. The text ends before the earliest occurrence of any
// stop string in what the model produced, whatever the order of the list
// and wherever the token boundaries fall: a match is final only once no
// other stop string could still complete at an earlier position.
type stopWriter struct {
	dec     *tokenizer.StreamDecoder
	stops   []string
	emit    func(string) error
	pending string
	text    strings.Builder
	stopped bool
}

// newStopWriter decodes what follows prompt: the prompt's tokens prime the
// decoder, so a continuation keeps its leading space.
func newStopWriter(t tokenizer.Tokenizer, prompt []int32, stops []string, emit func(string) error) *stopWriter {
	if emit == nil {
		emit = func(string) error { return nil }
	}
	dec := tokenizer.NewStreamDecoder(t)
	dec.Skip(prompt...)
	return &stopWriter{dec: dec, stops: stops, emit: emit}
}

// add decodes one token; it reports whether a stop string was completed.
func (w *stopWriter) add(id int32) (bool, error) {
	w.pending += w.dec.Add(id)
	return w.settle(false)
}

// settle emits what can no longer be part of a stop string and ends the
// text at a stop string once that is certain; final says no more text
// comes, so only complete matches count.
func (w *stopWriter) settle(final bool) (bool, error) {
	match := -1
	for _, s := range w.stops {
		if s == "" {
			continue
		}
		if i := strings.Index(w.pending, s); i >= 0 && (match < 0 || i < match) {
			match = i
		}
	}
	// hold is where the earliest stop string that more text could still
	// complete would start.
	hold := len(w.pending)
	if !final {
		hold = w.openPrefix()
	}
	if match >= 0 && match <= hold {
		w.pending = w.pending[:match]
		w.stopped = true
		return true, w.flushPending()
	}
	ready := w.pending[:hold]
	w.pending = w.pending[hold:]
	return false, w.write(ready)
}

// openPrefix is the earliest position from which the rest of pending is a
// proper prefix of a stop string (len(pending) when there is none).
func (w *stopWriter) openPrefix() int {
	for i := range len(w.pending) {
		rest := w.pending[i:]
		for _, s := range w.stops {
			if len(rest) < len(s) && strings.HasPrefix(s, rest) {
				return i
			}
		}
	}
	return len(w.pending)
}

func (w *stopWriter) write(s string) error {
	if s == "" {
		return nil
	}
	w.text.WriteString(s)
	return w.emit(s)
}

func (w *stopWriter) flushPending() error {
	s := w.pending
	w.pending = ""
	return w.write(s)
}

// flush emits whatever is held back at the end of generation; it reports
// whether that text held a stop string (one that waited on a longer stop
// string that might have started earlier).
func (w *stopWriter) flush() (bool, error) {
	if w.stopped {
		return true, nil
	}
	w.pending += w.dec.Flush()
	return w.settle(true)
}
