package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/sample"
)

// job is one generation request, parsed; acquire tokenizes it.
type job struct {
	endpoint string
	arrived  time.Time
	fields   *samplingFields
	// prompt is a completion's text, or a chat's messages rendered by the
	// template (for the byte bound before tokenizing; chat runs the messages).
	prompt string
	chat   []redrafter.Message // a chat's messages (nil for a completion)
	// encode tokenizes the prompt as Session.Generate or Chat will; acquire
	// runs it once the request is admitted.
	encode func() ([]int32, error)
	ids    []int32 // the prompt's tokens (set by acquire)
	opt    redrafter.GenerateOptions
}

// outcome is what a generation produced, for the response.
type outcome struct {
	res       *redrafter.Result
	slot      int
	cached    int           // prompt tokens found in the slot's cache
	firstText time.Duration // from arrival to the first text (0: none)
}

func (o *outcome) finishReason() string {
	if o.res.Reason == redrafter.StopLength {
		return "length"
	}
	return "stop"
}

func (o *outcome) usage(promptTokens int) *usage {
	u := &usage{PromptTokens: promptTokens, CompletionTokens: o.res.Stats.GeneratedTokens}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens = o.cached
	return u
}

func (o *outcome) extension() *extension {
	st := o.res.Stats
	x := &extension{Slot: o.slot, PrefillSeconds: st.Prefill.Seconds(), DecodeSeconds: st.Decode.Seconds(), TokensPerSec: finite(st.DecodeRate())}
	if d := st.Draft; d != nil && d.Steps > 0 {
		accepted, offered := draftCounts(st)
		x.Steps, x.TokensPerStep = d.Steps, finite(d.TokensPerStep())
		if offered > 0 {
			x.AcceptanceRate = float64(accepted) / float64(offered)
		}
		x.BeamWidth, x.BeamLength = st.BeamWidth, st.BeamLength
	}
	return x
}

// newJob checks a request and tokenizes its prompt: a completion's text, or
// a chat's messages (non-nil chat), whose content is plain text and only
// the template's markup special tokens (Engine.ChatTokens).
func (s *Server) newJob(endpoint string, arrived time.Time, f *samplingFields, prompt string, chat []redrafter.Message) (*job, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.Model != "" && f.Model != s.cfg.ModelName {
		return nil, modelNotFound(f.Model, s.cfg.ModelName)
	}
	params := sample.Params{Temperature: 1, TopP: 1} // OpenAI's defaults
	if d, ok := s.e.DefaultSampling(); ok {
		// The model's generation_config.json, for the fields not sent.
		params = sample.Params{Temperature: d.Temperature, TopK: d.TopK, TopP: d.TopP}
	}
	if f.Temperature != nil {
		params.Temperature = float32(*f.Temperature)
	}
	if f.TopP != nil {
		params.TopP = float32(*f.TopP)
	}
	if f.TopK != nil {
		params.TopK = *f.TopK
	}
	if err := params.Validate(); err != nil {
		return nil, badRequest("", "%v", err)
	}
	seed := mrand.Uint64()
	if f.Seed != nil {
		seed = uint64(*f.Seed)
	}
	opt := redrafter.GenerateOptions{
		MaxTokens: f.maxTokens(), Sampling: redrafter.Sampling{Temperature: params.Temperature, TopK: params.TopK, TopP: params.TopP, TopPSet: true}, Seed: seed, Stop: f.Stop,
		Draft: s.cfg.Draft,
	}
	encode := func() ([]int32, error) { return s.e.Tokenizer().Encode(prompt, true), nil }
	if chat != nil {
		// Rendering is cheap next to tokenizing: a template that cannot
		// frame the messages is refused here, before admission.
		var err error
		if prompt, err = s.e.RenderChat(chat, s.cfg.Template); err != nil {
			return nil, badRequest("messages", "messages: %v", err)
		}
		encode = func() ([]int32, error) { return s.e.ChatTokens(chat, s.cfg.Template) }
	}
	return &job{endpoint: endpoint, arrived: arrived, fields: f, prompt: prompt, chat: chat, encode: encode, opt: opt}, nil
}

// maxTokenBytes is the most prompt bytes one token of tok can stand for:
// the longest piece of its vocabulary (a piece is at least as long as the
// text it covers: SentencePiece's "▁" is 3 bytes for a space's one, a byte
// piece "<0x0A>" 6 for one, a byte-level BPE rune 1 or 2 for one), and at
// least 4 (an unknown token for one UTF-8 character). 0 when no bound is
// known: a tokenizer without pieces, or one that drops text it cannot
// encode (checked on a few such texts), which a prompt's bytes say nothing
// about.
func maxTokenBytes(tok redrafter.Tokenizer) int {
	pieces, ok := tok.(interface{ Piece(id int32) string })
	if !ok {
		return 0
	}
	n := 4
	for id := range tok.VocabSize() {
		n = max(n, len(pieces.Piece(int32(id))))
	}
	for _, probe := range []string{"\x01", "\xff", "\ue000", "\U0001f600", "\u00a0"} {
		text := strings.Repeat(probe, 64)
		if len(tok.Encode(text, false))*n < len(text) {
			return 0
		}
	}
	return n
}

func contextExceeded(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, kind: "invalid_request_error", code: "context_length_exceeded", message: fmt.Sprintf(format, args...)}
}

func modelNotFound(asked, have string) *apiError {
	return &apiError{status: http.StatusNotFound, kind: "invalid_request_error", code: "model_not_found", param: "model",
		message: fmt.Sprintf("the model %q does not exist: this server serves %q", asked, have)}
}

// acquire admits j (under --parallel and --queue, so that tokenizing counts
// as the request's work), refuses a prompt that cannot fit the context
// (first by its bytes, without tokenizing), tokenizes it and takes a slot;
// or says why not as an API error. The slot's release counts j out.
func (s *Server) acquire(ctx context.Context, j *job) (*slot, error) {
	if err := s.sched.admit(); err != nil {
		return nil, s.busyError()
	}
	var sl *slot
	defer func() {
		if sl == nil { // refused, cancelled or panicked before a slot
			s.sched.leave()
		}
	}()
	sl, err := s.tokenizeAndWait(ctx, j)
	if err != nil {
		return nil, err
	}
	if s.testAcquired != nil {
		s.testAcquired(ctx)
	}
	return sl, nil
}

func (s *Server) tokenizeAndWait(ctx context.Context, j *job) (*slot, error) {
	ctxLen := s.e.Context()
	// A token stands for at most maxTokenBytes bytes, so a prompt of
	// ctxLen*maxTokenBytes bytes or more is ctxLen tokens or more: refused
	// without the work (and memory) of tokenizing it.
	if n := s.maxTokenBytes; n > 0 && len(j.prompt) >= ctxLen*n {
		return nil, contextExceeded("the prompt is %d bytes, so at least %d tokens; the context holds %d, and at least 1 must be left for the reply",
			len(j.prompt), len(j.prompt)/n, ctxLen)
	}
	ids, err := j.encode()
	if err != nil {
		return nil, badRequest("messages", "messages: %v", err)
	}
	j.ids = ids
	if len(j.ids) == 0 {
		return nil, badRequest("prompt", "the prompt is empty and the model has no BOS token to start from")
	}
	if len(j.ids) >= ctxLen {
		return nil, contextExceeded("the prompt is %d tokens; the context holds %d, and at least 1 must be left for the reply", len(j.ids), ctxLen)
	}
	sl, err := s.sched.acquire(ctx, j.ids)
	if errors.Is(err, errQueueFull) {
		return nil, s.busyError()
	}
	return sl, err
}

func (s *Server) busyError() *apiError {
	return &apiError{status: http.StatusTooManyRequests, kind: "rate_limit_error", code: "server_busy",
		message: fmt.Sprintf("the server is busy: %d requests are decoding and %d waiting (--parallel, --queue); retry later", s.cfg.Parallel, s.cfg.Queue)}
}

// generate runs j on sl and gives the slot back. onText gets the text as it
// comes; an error from it (a client that went away) stops the generation.
// A panic leaves the slot's session in an unknown state: the slot gets a
// fresh one before it is given back, and the panic goes on to recoverer.
func (s *Server) generate(ctx context.Context, j *job, sl *slot, onText func(string) error) (*outcome, error) {
	out := &outcome{slot: sl.id, cached: commonPrefix(sl.session.Tokens(), j.ids)}
	completed := false
	defer func() {
		if !completed {
			sl.session.Close()
			if fresh, err := s.newSlotSession(); err == nil {
				sl.session = fresh
			} else {
				s.log.Error("replacing a slot's session after a panic", "slot", sl.id, "err", err)
				s.sched.leave() // the request is over; the slot stays out of use
				return
			}
		}
		s.sched.release(sl)
	}()
	emit := func(text string) error {
		if out.firstText == 0 {
			out.firstText = time.Since(j.arrived)
		}
		// The text comes on the session's goroutine, between its steps:
		// its tokens are what its cache holds now (the metrics' KV use).
		sl.held.Store(int64(len(sl.session.Tokens())))
		// The text comes on the session's goroutine, between its steps:
		// its tokens are what its cache holds now (the metrics' KV use).
		sl.held.Store(int64(len(sl.session.Tokens())))
		if err := onText(text); err != nil {
			return err
		}
		if s.testText != nil {
			s.testText(ctx)
		}
		return nil
	}
	var res *redrafter.Result
	var err error
	if j.chat != nil {
		res, err = sl.session.Chat(ctx, j.chat, redrafter.ChatOptions{Template: s.cfg.Template, GenerateOptions: j.opt}, emit)
	} else {
		res, err = sl.session.Generate(ctx, j.prompt, j.opt, emit)
	}
	completed = true
	out.res = res
	// A cache hit is what Session.Generate did not prefill again.
	if res != nil {
		out.cached = len(j.ids) - res.Stats.PromptTokens
	}
	reason := "error"
	switch {
	case err == nil:
		reason = out.finishReason()
	case ctx.Err() != nil:
		reason = "canceled"
	}
	s.metrics.observe(reason, len(j.ids), out.cached, res, out.firstText)
	s.metrics.requestSeconds.WithLabelValues(j.endpoint).Observe(time.Since(j.arrived).Seconds())
	if err != nil {
		return out, err
	}
	return out, nil
}

// generationError answers an error of a generation that never sent a byte.
func (s *Server) generationError(w http.ResponseWriter, r *http.Request, err error) {
	var apiErr *apiError
	switch {
	case errors.As(err, &apiErr):
		writeError(w, apiErr)
	case r.Context().Err() != nil:
		// The client is gone, or the server is shutting down.
		writeError(w, &apiError{status: http.StatusServiceUnavailable, kind: "server_error", code: "canceled", message: "the request was cancelled: " + context.Cause(r.Context()).Error()})
	default:
		s.log.Error("generation failed", "path", r.URL.Path, "err", err)
		writeError(w, &apiError{status: http.StatusInternalServerError, kind: "server_error", message: err.Error()})
	}
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), v)
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var req chatRequest
	if err := s.readBody(w, r, &req); err != nil {
		s.generationError(w, r, err)
		return
	}
	msgs, err := req.messages()
	if err != nil {
		s.generationError(w, r, err)
		return
	}
	chat := make([]redrafter.Message, len(msgs))
	for i, m := range msgs {
		chat[i] = redrafter.Message{Role: m.Role, Content: m.Content}
	}
	j, err := s.newJob("/v1/chat/completions", arrived, &req.samplingFields, "", chat)
	if err != nil {
		s.generationError(w, r, err)
		return
	}
	sl, err := s.acquire(r.Context(), j)
	if err != nil {
		s.generationError(w, r, err)
		return
	}
	resp := chatResponse{ID: newID("chatcmpl-"), Created: arrived.Unix(), Model: s.cfg.ModelName, SystemFingerprint: "redrafter"}
	if !req.Stream {
		out, err := s.generate(r.Context(), j, sl, func(string) error { return nil })
		if err != nil {
			s.generationError(w, r, err)
			return
		}
		text, reason := out.res.Text, out.finishReason()
		resp.Object = "chat.completion"
		resp.Choices = []chatChoice{{Message: &chatOut{Role: "assistant", Content: &text}, FinishReason: &reason}}
		resp.Usage, resp.Redrafter = out.usage(len(j.ids)), out.extension()
		s.setWriteDeadline(w)
		writeJSON(w, http.StatusOK, resp)
		return
	}
	resp.Object = "chat.completion.chunk"
	st := s.startStream(w)
	empty := ""
	st.send(chatChunk(resp, chatChoice{Delta: &chatOut{Role: "assistant", Content: &empty}}))
	out, err := s.generate(r.Context(), j, sl, func(text string) error {
		return st.send(chatChunk(resp, chatChoice{Delta: &chatOut{Content: &text}}))
	})
	if err != nil {
		st.fail(r, err)
		return
	}
	reason := out.finishReason()
	last := chatChunk(resp, chatChoice{Delta: &chatOut{}, FinishReason: &reason})
	last.Redrafter = out.extension()
	st.send(last)
	if req.includeUsage() {
		u := resp
		u.Choices, u.Usage = []chatChoice{}, out.usage(len(j.ids))
		st.send(u)
	}
	st.done()
}

func chatChunk(base chatResponse, c chatChoice) chatResponse {
	base.Choices = []chatChoice{c}
	return base
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var req completionRequest
	if err := s.readBody(w, r, &req); err != nil {
		s.generationError(w, r, err)
		return
	}
	prompt, err := req.promptText()
	if err != nil {
		s.generationError(w, r, err)
		return
	}
	// As `redrafter generate`: BOS first, control-token text not parsed.
	j, err := s.newJob("/v1/completions", arrived, &req.samplingFields, prompt, nil)
	if err != nil {
		s.generationError(w, r, err)
		return
	}
	sl, err := s.acquire(r.Context(), j)
	if err != nil {
		s.generationError(w, r, err)
		return
	}
	resp := completionResponse{ID: newID("cmpl-"), Object: "text_completion", Created: arrived.Unix(), Model: s.cfg.ModelName, SystemFingerprint: "redrafter"}
	if !req.Stream {
		out, err := s.generate(r.Context(), j, sl, func(string) error { return nil })
		if err != nil {
			s.generationError(w, r, err)
			return
		}
		reason := out.finishReason()
		resp.Choices = []completionChoice{{Text: out.res.Text, FinishReason: &reason}}
		resp.Usage, resp.Redrafter = out.usage(len(j.ids)), out.extension()
		s.setWriteDeadline(w)
		writeJSON(w, http.StatusOK, resp)
		return
	}
	st := s.startStream(w)
	out, err := s.generate(r.Context(), j, sl, func(text string) error {
		c := resp
		c.Choices = []completionChoice{{Text: text}}
		return st.send(c)
	})
	if err != nil {
		st.fail(r, err)
		return
	}
	reason := out.finishReason()
	last := resp
	last.Choices = []completionChoice{{FinishReason: &reason}}
	last.Redrafter = out.extension()
	st.send(last)
	if req.includeUsage() {
		u := resp
		u.Choices, u.Usage = []completionChoice{}, out.usage(len(j.ids))
		st.send(u)
	}
	st.done()
}

// setWriteDeadline bounds the next writes of a response by WriteTimeout.
func (s *Server) setWriteDeadline(w http.ResponseWriter) {
	// Not every ResponseWriter has a connection (httptest.ResponseRecorder).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
}

// stream writes server-sent events: "data: JSON\n\n" per event, flushed
// at once, each write bounded by WriteTimeout so that a client that stops
// reading fails the write and ends its generation.
type stream struct {
	s   *Server
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error // the first failed write; later sends do nothing
}

func (s *Server) startStream(w http.ResponseWriter) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &stream{s: s, w: w, rc: http.NewResponseController(w)}
}

func (st *stream) write(b []byte) error {
	if st.err != nil {
		return st.err
	}
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.s.cfg.WriteTimeout))
	if _, err := st.w.Write(b); err != nil {
		st.err = err
		return err
	}
	if err := st.rc.Flush(); err != nil {
		st.err = err
	}
	return st.err
}

func (st *stream) send(v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		panic(fmt.Sprintf("server: encoding an event: %v", err))
	}
	return st.write(append(append([]byte("data: "), b[:len(b)-1]...), '\n', '\n'))
}

func (st *stream) done() { st.write([]byte("data: [DONE]\n\n")) }

// fail ends a stream that a generation error cut short: the error as an
// event (when the client is still there), then [DONE].
func (st *stream) fail(r *http.Request, err error) {
	if r.Context().Err() != nil && st.err == nil && !errors.Is(context.Cause(r.Context()), errShutdown) {
		return // the client went away
	}
	if st.err != nil {
		st.s.log.Info("stream cut short: the client stopped reading", "path", r.URL.Path, "err", st.err)
		return
	}
	e := &apiError{status: http.StatusInternalServerError, kind: "server_error", message: err.Error()}
	if errors.Is(context.Cause(r.Context()), errShutdown) {
		e.code, e.message = "shutting_down", "the server is shutting down"
	} else {
		st.s.log.Error("generation failed", "path", r.URL.Path, "err", err)
	}
	st.send(e.body())
	st.done()
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Context is the tokens a request may hold (prompt and reply).
	Context int `json:"context_length"`
}

func (s *Server) model() modelEntry {
	return modelEntry{ID: s.cfg.ModelName, Object: "model", Created: s.created, OwnedBy: "redrafter", Context: s.e.Context()}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{"list", []modelEntry{s.model()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("model"); name != s.cfg.ModelName {
		writeError(w, modelNotFound(name, s.cfg.ModelName))
		return
	}
	writeJSON(w, http.StatusOK, s.model())
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	busy, queued := s.sched.busy()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "slots": len(s.slots), "slots_busy": busy, "queued": queued})
}

// maxTokenize bounds the ids /detokenize accepts (the body limit bounds
// /tokenize's text).
const maxTokenize = 1 << 20

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Content    *string `json:"content"`
		AddSpecial bool    `json:"add_special"` // prepend BOS
		// ParseSpecial makes control-token text ("<s>") its token.
		ParseSpecial bool `json:"parse_special"`
	}
	if err := s.readBody(w, r, &req); err != nil {
		s.generationError(w, r, err)
		return
	}
	if req.Content == nil {
		writeError(w, badRequest("content", "content: required (a string)"))
		return
	}
	// Tokenizing is the request's work: it counts under --parallel and
	// --queue as a generation does.
	if err := s.sched.admit(); err != nil {
		writeError(w, s.busyError())
		return
	}
	ids := func() []int32 {
		defer s.sched.leave()
		if req.ParseSpecial {
			return s.e.Tokenizer().EncodeSpecial(*req.Content, req.AddSpecial)
		}
		return s.e.Tokenizer().Encode(*req.Content, req.AddSpecial)
	}()
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens []int64 `json:"tokens"`
	}
	if err := s.readBody(w, r, &req); err != nil {
		s.generationError(w, r, err)
		return
	}
	if len(req.Tokens) > maxTokenize {
		writeError(w, badRequest("tokens", "tokens: %d ids, at most %d", len(req.Tokens), maxTokenize))
		return
	}
	vocab := s.e.Tokenizer().VocabSize()
	ids := make([]int32, len(req.Tokens))
	for i, id := range req.Tokens {
		if id < 0 || id >= int64(vocab) || id > math.MaxInt32 {
			writeError(w, badRequest("tokens", "tokens[%d]: %d is not a token id (the vocabulary has %d)", i, id, vocab))
			return
		}
		ids[i] = int32(id)
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": s.e.Tokenizer().Decode(ids)})
}
