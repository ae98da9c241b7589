//go:build cgo

package main

/*
#include <stdlib.h>
#include <string.h>
#include "redrafter.h"

// The header's const pointers. cgo drops const from Go's view of a type,
// and the prototypes it writes for //export functions must agree with
// redrafter.h, so parameters are declared through these names.
typedef const char rd_cchar;
typedef const int32_t rd_cint32;
typedef const rd_load_options rd_cload_options;
typedef const rd_generate_options rd_cgenerate_options;
typedef const rd_message rd_cmessage;
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter"
	// The GPU on Apple Silicon for backend "auto" (NULL); elsewhere it does
	// not open and the CPU runs.
	_ "github.com/seed9b8f47b1/redrafter/backend/metal"
)

// The library's version; redrafter.h's REDRAFTER_VERSION_* say the same.
const versionMajor, versionMinor, versionPatch = 0, 1, 0

// engine is what an rd_engine handle holds.
type engine struct {
	// mu is read-held by every call that uses the engine and write-held by
	// rd_engine_free, which takes it with TryLock: freeing an engine in use
	// is RD_ERR_BUSY, never a Close under a running call.
	mu       sync.RWMutex
	e        *redrafter.Engine
	closed   bool
	sessions atomic.Int32 // live sessions; rd_engine_free refuses while any
	draft    redrafter.DraftOptions
}

// session is what an rd_session handle holds.
type session struct {
	eng *engine
	// busy is held for a whole generation and by rd_session_free, both with
	// TryLock: one session is not safe for concurrent use, so a second
	// caller gets RD_ERR_BUSY.
	busy  sync.Mutex
	s     *redrafter.Session
	freed bool
	// cancelMu guards cancel, the running generation's (nil when none), which
	// rd_session_cancel calls from any thread.
	cancelMu sync.Mutex
	cancel   context.CancelCauseFunc
}

// errCanceled is the cause of a cancel by rd_session_cancel, told apart from
// errCallback, the error a callback's nonzero return ends the generation
// with.
var (
	errCanceled = errors.New("canceled by rd_session_cancel")
	errCallback = errors.New("stopped by the token callback")
)

// apiError is an error with its status.
type apiError struct {
	status C.rd_status
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func fail(status C.rd_status, format string, args ...any) error {
	return &apiError{status, fmt.Sprintf(format, args...)}
}

// call runs one exported function's body: it clears *errOut, turns the
// body's error into a status and message, and a panic into RD_ERR_INTERNAL,
// so that no Go panic ever unwinds into the caller's C frames.
func call(errOut **C.char, body func() error) (status C.rd_status) {
	if errOut != nil {
		*errOut = nil
	}
	defer func() {
		if p := recover(); p != nil {
			slog.Error("libredrafter: recovered a panic", "panic", p, "stack", string(debug.Stack()))
			status = C.RD_ERR_INTERNAL
			setErr(errOut, fmt.Sprintf("redrafter: internal error (please report it): %v", p))
		}
	}()
	err := body()
	if err == nil {
		return C.RD_OK
	}
	status = C.RD_ERR_GENERATE
	var ae *apiError
	if errors.As(err, &ae) {
		status = ae.status
	}
	setErr(errOut, err.Error())
	return status
}

func setErr(errOut **C.char, msg string) {
	if errOut != nil {
		*errOut = C.CString(msg)
	}
}

func getEngine(h C.rd_engine) (*engine, error) {
	if v, ok := handles.get(uint64(h), kindEngine).(*engine); ok {
		return v, nil
	}
	return nil, fail(C.RD_ERR_HANDLE, "redrafter: %d is not a live engine handle", uint64(h))
}

func getSession(h C.rd_session) (*session, error) {
	if v, ok := handles.get(uint64(h), kindSession).(*session); ok {
		return v, nil
	}
	return nil, fail(C.RD_ERR_HANDLE, "redrafter: %d is not a live session handle", uint64(h))
}

// use read-locks a live engine for one call; the caller runs the returned
// release when done.
func (eng *engine) use() (release func(), err error) {
	eng.mu.RLock()
	if eng.closed {
		eng.mu.RUnlock()
		return nil, fail(C.RD_ERR_HANDLE, "redrafter: the engine was freed")
	}
	return eng.mu.RUnlock, nil
}

// goString copies a C string that must not be NULL; what names the argument.
func goString(p *C.rd_cchar, what string) (string, error) {
	if p == nil {
		return "", fail(C.RD_ERR_ARGUMENT, "redrafter: %s is NULL", what)
	}
	return C.GoString((*C.char)(unsafe.Pointer(p))), nil
}

// optString copies a C string that may be NULL ("").
func optString(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

//export rd_version
func rd_version(major, minor, patch *C.int32_t, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if major == nil || minor == nil || patch == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: rd_version needs three pointers")
		}
		*major, *minor, *patch = versionMajor, versionMinor, versionPatch
		return nil
	})
}

//export rd_free
func rd_free(p unsafe.Pointer) {
	C.free(p)
}

//export rd_load_options_init
func rd_load_options_init(opts *C.rd_load_options, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if opts == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: opts is NULL")
		}
		*opts = C.rd_load_options{struct_size: C.uint32_t(unsafe.Sizeof(*opts))}
		return nil
	})
}

//export rd_engine_load
func rd_engine_load(path *C.rd_cchar, copts *C.rd_cload_options, out *C.rd_engine, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		modelPath, err := goString(path, "model_path")
		if err != nil {
			return err
		}
		if out == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: out is NULL")
		}
		*out = 0
		var o C.rd_load_options
		rd_load_options_init(&o, nil)
		if copts != nil {
			if copts.struct_size != o.struct_size {
				return fail(C.RD_ERR_ARGUMENT, "redrafter: rd_load_options.struct_size is %d, want %d (fill the options with rd_load_options_init)", copts.struct_size, o.struct_size)
			}
			o = *(*C.rd_load_options)(unsafe.Pointer(copts))
		}
		switch {
		case o.threads < 0 || int(o.threads) > 4*runtime.NumCPU(): // redrafter.Options.Threads' bound
			return fail(C.RD_ERR_ARGUMENT, "redrafter: threads %d: want 1 to %d (4× the %d CPUs), or 0 for all cores", o.threads, 4*runtime.NumCPU(), runtime.NumCPU())
		case o.context < 0:
			return fail(C.RD_ERR_ARGUMENT, "redrafter: context %d: want 0 (the model's) or more", o.context)
		case o.beam_width < 0 || o.beam_width > 50:
			return fail(C.RD_ERR_ARGUMENT, "redrafter: beam_width %d: want 1 to 50, or 0 for the default", o.beam_width)
		case o.beam_length < 0 || o.beam_length == 1:
			return fail(C.RD_ERR_ARGUMENT, "redrafter: beam_length %d: want 2 or more, or 0 for the default", o.beam_length)
		case o.drafter == nil && (o.beam_width != 0 || o.beam_length != 0):
			return fail(C.RD_ERR_ARGUMENT, "redrafter: beam_width and beam_length need a drafter")
		}
		e, err := redrafter.Load(modelPath, redrafter.Options{
			Backend: optString(o.backend),
			Context: int(o.context),
			KVCache: optString(o.kv_cache),
			Threads: int(o.threads),
		})
		if err != nil {
			return fail(C.RD_ERR_LOAD, "%v", err)
		}
		// Options.Context caps a larger context to the model's; a C caller
		// asking for more learns it rather than getting less silently (the
		// CLI's --context alike).
		if most := e.Model().TrainedContext; int(o.context) > most {
			e.Close()
			return fail(C.RD_ERR_ARGUMENT, "redrafter: context %d: the model holds at most %d tokens (0 for all of them)", o.context, most)
		}
		if o.drafter != nil {
			if err := e.LoadDrafter(C.GoString(o.drafter)); err != nil {
				e.Close()
				return fail(C.RD_ERR_LOAD, "%v", err)
			}
		}
		eng := &engine{e: e, draft: redrafter.DraftOptions{BeamWidth: int(o.beam_width), BeamLength: int(o.beam_length)}}
		*out = C.rd_engine(handles.add(kindEngine, eng))
		return nil
	})
}

//export rd_engine_free
func rd_engine_free(h C.rd_engine, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		eng, err := getEngine(h)
		if err != nil {
			return err
		}
		if !eng.mu.TryLock() {
			return fail(C.RD_ERR_BUSY, "redrafter: the engine is in use by another thread")
		}
		defer eng.mu.Unlock()
		if n := eng.sessions.Load(); n > 0 {
			return fail(C.RD_ERR_BUSY, "redrafter: the engine has %d sessions not yet freed", n)
		}
		if !handles.remove(uint64(h), kindEngine) {
			return fail(C.RD_ERR_HANDLE, "redrafter: %d is not a live engine handle", uint64(h))
		}
		eng.closed = true
		return eng.e.Close()
	})
}

//export rd_engine_context
func rd_engine_context(h C.rd_engine, out *C.int32_t, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if out == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: out is NULL")
		}
		eng, err := getEngine(h)
		if err != nil {
			return err
		}
		release, err := eng.use()
		if err != nil {
			return err
		}
		defer release()
		*out = C.int32_t(eng.e.Context())
		return nil
	})
}

//export rd_tokenize
func rd_tokenize(h C.rd_engine, ctext *C.rd_cchar, addBOS C.int32_t, tokens **C.int32_t, n *C.size_t, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		text, err := goString(ctext, "text")
		if err != nil {
			return err
		}
		if tokens == nil || n == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: tokens and n_tokens must not be NULL")
		}
		*tokens, *n = nil, 0
		eng, err := getEngine(h)
		if err != nil {
			return err
		}
		release, err := eng.use()
		if err != nil {
			return err
		}
		defer release()
		ids := eng.e.Tokenizer().Encode(text, addBOS != 0)
		// One element more than needed so that an empty result is still a
		// pointer rd_free takes.
		p := (*C.int32_t)(C.malloc(C.size_t(len(ids)+1) * C.size_t(unsafe.Sizeof(C.int32_t(0)))))
		dst := unsafe.Slice(p, len(ids)+1)
		for i, id := range ids {
			dst[i] = C.int32_t(id)
		}
		*tokens, *n = p, C.size_t(len(ids))
		return nil
	})
}

// maxDetokenize bounds rd_detokenize's count: far more tokens than any
// context holds, and few enough that their ids and text fit in memory.
const maxDetokenize = 1 << 24

//export rd_detokenize
func rd_detokenize(h C.rd_engine, ctokens *C.rd_cint32, n C.size_t, text **C.char, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if text == nil || (ctokens == nil && n > 0) {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: text is NULL, or tokens is NULL with n_tokens > 0")
		}
		if n > maxDetokenize {
			// Before any slice of that length is made: a size_t count that
			// is no array's would be a Go panic, or an abort out of memory.
			return fail(C.RD_ERR_ARGUMENT, "redrafter: n_tokens %d: at most %d", uint64(n), maxDetokenize)
		}
		*text = nil
		eng, err := getEngine(h)
		if err != nil {
			return err
		}
		release, err := eng.use()
		if err != nil {
			return err
		}
		defer release()
		ids := make([]int32, n)
		if n > 0 {
			for i, id := range unsafe.Slice((*C.int32_t)(unsafe.Pointer(ctokens)), int(n)) {
				if id < 0 || int(id) >= eng.e.Tokenizer().VocabSize() {
					return fail(C.RD_ERR_ARGUMENT, "redrafter: token %d (at %d) is not in the vocabulary of %d", int32(id), i, eng.e.Tokenizer().VocabSize())
				}
				ids[i] = int32(id)
			}
		}
		*text = C.CString(eng.e.Tokenizer().Decode(ids))
		return nil
	})
}

//export rd_session_new
func rd_session_new(h C.rd_engine, out *C.rd_session, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if out == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: out is NULL")
		}
		*out = 0
		eng, err := getEngine(h)
		if err != nil {
			return err
		}
		release, err := eng.use()
		if err != nil {
			return err
		}
		defer release()
		s, err := eng.e.NewSession()
		if err != nil {
			return fail(C.RD_ERR_GENERATE, "%v", err)
		}
		// Counted under the read lock: rd_engine_free, which reads the count
		// under the write lock, cannot come in between.
		eng.sessions.Add(1)
		*out = C.rd_session(handles.add(kindSession, &session{eng: eng, s: s}))
		return nil
	})
}

//export rd_session_free
func rd_session_free(h C.rd_session, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		s, err := getSession(h)
		if err != nil {
			return err
		}
		if !s.busy.TryLock() {
			return fail(C.RD_ERR_BUSY, "redrafter: the session is generating on another thread")
		}
		defer s.busy.Unlock()
		if !handles.remove(uint64(h), kindSession) {
			return fail(C.RD_ERR_HANDLE, "redrafter: %d is not a live session handle", uint64(h))
		}
		s.freed = true
		s.s.Close()
		s.eng.sessions.Add(-1)
		return nil
	})
}

//export rd_generate_options_init
func rd_generate_options_init(opts *C.rd_generate_options, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if opts == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: opts is NULL")
		}
		*opts = C.rd_generate_options{
			struct_size: C.uint32_t(unsafe.Sizeof(*opts)),
			max_tokens:  256,
			top_p:       1,
		}
		return nil
	})
}

// generateOptions converts C options (NULL: the defaults).
func (s *session) generateOptions(copts *C.rd_cgenerate_options) (redrafter.GenerateOptions, error) {
	var o C.rd_generate_options
	rd_generate_options_init(&o, nil)
	if copts != nil {
		if copts.struct_size != o.struct_size {
			return redrafter.GenerateOptions{}, fail(C.RD_ERR_ARGUMENT, "redrafter: rd_generate_options.struct_size is %d, want %d (fill the options with rd_generate_options_init)", copts.struct_size, o.struct_size)
		}
		o = *(*C.rd_generate_options)(unsafe.Pointer(copts))
	}
	if o.stop == nil && o.n_stop > 0 {
		return redrafter.GenerateOptions{}, fail(C.RD_ERR_ARGUMENT, "redrafter: stop is NULL with n_stop %d", o.n_stop)
	}
	var stops []string
	if o.n_stop > 0 {
		for i, p := range unsafe.Slice(o.stop, int(o.n_stop)) {
			if p == nil {
				return redrafter.GenerateOptions{}, fail(C.RD_ERR_ARGUMENT, "redrafter: stop[%d] is NULL", i)
			}
			stops = append(stops, C.GoString(p))
		}
	}
	draft := s.eng.draft
	draft.Off = o.no_draft != 0
	return redrafter.GenerateOptions{
		MaxTokens: int(o.max_tokens),
		Sampling:  redrafter.Sampling{Temperature: float32(o.temperature), TopK: int(o.top_k), TopP: float32(o.top_p), TopPSet: true},
		Seed:      uint64(o.seed),
		Stop:      stops,
		Draft:     draft,
	}, nil
}

// generate runs one generation on a live session, with the callback bridged
// and rd_session_cancel wired to its context, and fills result.
func generate(h C.rd_session, s *session, cb C.rd_token_callback, user unsafe.Pointer, result *C.rd_result,
	run func(ctx context.Context, onText func(string) error) (*redrafter.Result, error)) error {
	if result != nil {
		*result = C.rd_result{reason: C.RD_REASON_ERROR}
	}
	if !s.busy.TryLock() {
		return fail(C.RD_ERR_BUSY, "redrafter: the session is already generating (one thread at a time per session)")
	}
	defer s.busy.Unlock()
	if s.freed {
		return fail(C.RD_ERR_HANDLE, "redrafter: %d is not a live session handle", uint64(h))
	}
	release, err := s.eng.use()
	if err != nil {
		return err
	}
	defer release()

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	s.cancelMu.Lock()
	s.cancel = cancel
	s.cancelMu.Unlock()
	defer func() {
		s.cancelMu.Lock()
		s.cancel = nil
		s.cancelMu.Unlock()
	}()

	var onText func(string) error
	if cb != nil {
		onText = func(piece string) error {
			p := C.CString(piece)
			defer C.free(unsafe.Pointer(p))
			if callToken(cb, p, C.size_t(len(piece)), user) != 0 {
				return errCallback
			}
			return nil
		}
	}
	res, err := run(ctx, onText)
	if res == nil {
		if err == nil {
			err = errors.New("redrafter: no result") // not reached: Generate and Chat return one or an error
		}
		if errors.Is(err, redrafter.ErrClosed) {
			return fail(C.RD_ERR_HANDLE, "%v", err)
		}
		return fail(C.RD_ERR_ARGUMENT, "%v", err)
	}
	reason := C.rd_reason(C.RD_REASON_ERROR)
	switch {
	case err == nil:
		reason = reasons[res.Reason]
	case errors.Is(err, errCallback):
		reason, err = C.RD_REASON_CALLBACK, nil
	case errors.Is(context.Cause(ctx), errCanceled):
		reason, err = C.RD_REASON_CANCELED, nil
	}
	if result != nil {
		fillResult(result, res, reason)
	}
	if err != nil {
		return fail(C.RD_ERR_GENERATE, "%v", err)
	}
	return nil
}

var reasons = map[redrafter.StopReason]C.rd_reason{
	redrafter.StopEOS:      C.RD_REASON_EOS,
	redrafter.StopString:   C.RD_REASON_STOP,
	redrafter.StopLength:   C.RD_REASON_LENGTH,
	redrafter.StopCanceled: C.RD_REASON_CANCELED,
	redrafter.StopError:    C.RD_REASON_ERROR,
}

func fillResult(out *C.rd_result, res *redrafter.Result, reason C.rd_reason) {
	st := res.Stats
	stats := C.rd_stats{
		prompt_tokens:     C.int32_t(st.PromptTokens),
		generated_tokens:  C.int32_t(st.GeneratedTokens),
		prefill_seconds:   C.double(st.Prefill.Seconds()),
		decode_seconds:    C.double(st.Decode.Seconds()),
		tokens_per_second: C.double(st.DecodeRate()),
	}
	if st.Draft != nil {
		stats.draft_steps = C.int32_t(st.Draft.Steps)
		stats.tokens_per_step = C.double(st.Draft.TokensPerStep())
		stats.beam_width, stats.beam_length = C.int32_t(st.BeamWidth), C.int32_t(st.BeamLength)
	}
	*out = C.rd_result{text: C.CString(res.Text), reason: reason, stats: stats}
}

//export rd_session_generate
func rd_session_generate(h C.rd_session, cprompt *C.rd_cchar, copts *C.rd_cgenerate_options,
	cb C.rd_token_callback, user unsafe.Pointer, result *C.rd_result, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if result != nil {
			*result = C.rd_result{reason: C.RD_REASON_ERROR}
		}
		prompt, err := goString(cprompt, "prompt")
		if err != nil {
			return err
		}
		s, err := getSession(h)
		if err != nil {
			return err
		}
		opt, err := s.generateOptions(copts)
		if err != nil {
			return err
		}
		return generate(h, s, cb, user, result, func(ctx context.Context, onText func(string) error) (*redrafter.Result, error) {
			return s.s.Generate(ctx, prompt, opt, onText)
		})
	})
}

//export rd_session_cancel
func rd_session_cancel(h C.rd_session, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		s, err := getSession(h)
		if err != nil {
			return err
		}
		s.cancelMu.Lock()
		if s.cancel != nil {
			s.cancel(errCanceled)
		}
		s.cancelMu.Unlock()
		return nil
	})
}

// chatMessages converts C messages and a template name (NULL: "auto");
// the API checks the roles and the name, and renders.
func chatMessages(cmsgs *C.rd_cmessage, n C.size_t, ctmpl *C.rd_cchar) ([]redrafter.Message, string, error) {
	if cmsgs == nil || n == 0 {
		return nil, "", fail(C.RD_ERR_ARGUMENT, "redrafter: no messages")
	}
	tmpl := "auto"
	if ctmpl != nil {
		tmpl = C.GoString((*C.char)(unsafe.Pointer(ctmpl)))
		if tmpl == "" {
			// The Go API takes "" for auto (ChatOptions' zero value); here
			// only NULL is, as the header says and as it always was.
			return nil, "", fail(C.RD_ERR_ARGUMENT, "redrafter: chat template %q: want vicuna, llama2, chatml, llama3 or auto", tmpl)
		}
	}
	msgs := make([]redrafter.Message, n)
	for i, m := range unsafe.Slice((*C.rd_message)(unsafe.Pointer(cmsgs)), int(n)) {
		if m.role == nil || m.content == nil {
			return nil, "", fail(C.RD_ERR_ARGUMENT, "redrafter: message %d has a NULL role or content", i)
		}
		msgs[i] = redrafter.Message{Role: C.GoString(m.role), Content: C.GoString(m.content)}
	}
	return msgs, tmpl, nil
}

//export rd_chat_render
func rd_chat_render(h C.rd_engine, cmsgs *C.rd_cmessage, n C.size_t, ctmpl *C.rd_cchar, out **C.char, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if out == nil {
			return fail(C.RD_ERR_ARGUMENT, "redrafter: prompt is NULL")
		}
		*out = nil
		eng, err := getEngine(h)
		if err != nil {
			return err
		}
		release, err := eng.use()
		if err != nil {
			return err
		}
		defer release()
		msgs, tmpl, err := chatMessages(cmsgs, n, ctmpl)
		if err != nil {
			return err
		}
		prompt, err := eng.e.RenderChat(msgs, tmpl)
		if err != nil {
			return fail(C.RD_ERR_ARGUMENT, "%v", err)
		}
		*out = C.CString(prompt)
		return nil
	})
}

//export rd_session_chat
func rd_session_chat(h C.rd_session, cmsgs *C.rd_cmessage, n C.size_t, ctmpl *C.rd_cchar, copts *C.rd_cgenerate_options,
	cb C.rd_token_callback, user unsafe.Pointer, result *C.rd_result, errOut **C.char) C.rd_status {
	return call(errOut, func() error {
		if result != nil {
			*result = C.rd_result{reason: C.RD_REASON_ERROR}
		}
		s, err := getSession(h)
		if err != nil {
			return err
		}
		opt, err := s.generateOptions(copts)
		if err != nil {
			return err
		}
		release, err := s.eng.use()
		if err != nil {
			return err
		}
		msgs, tmpl, err := chatMessages(cmsgs, n, ctmpl)
		if err == nil {
			// A conversation that can never be rendered is RD_ERR_ARGUMENT
			// even while the session is busy: a caller told RD_ERR_BUSY
			// would retry a call that cannot succeed.
			if _, rerr := s.eng.e.RenderChat(msgs, tmpl); rerr != nil {
				err = fail(C.RD_ERR_ARGUMENT, "%v", rerr)
			}
		}
		release()
		if err != nil {
			return err
		}
		// Session.Chat renders as rd_chat_render does, parses the template's
		// special tokens and adds no second BOS (as the CLI's chat); a
		// conversation it refuses comes back without a Result, which
		// generate reports as RD_ERR_ARGUMENT.
		return generate(h, s, cb, user, result, func(ctx context.Context, onText func(string) error) (*redrafter.Result, error) {
			return s.s.Chat(ctx, msgs, redrafter.ChatOptions{Template: tmpl, GenerateOptions: opt}, onText)
		})
	})
}

func main() {}
