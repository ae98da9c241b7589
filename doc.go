// Package redrafter is the public Go API of redrafter: load a Llama-family
// model (and, optionally, a ReDrafter draft head), then generate text from it
// with streaming, cancellation through context.Context, and statistics.
//
//	e, err := redrafter.Load("model.gguf", redrafter.Options{})
//	if err != nil { ... }
//	defer e.Close()
//	if err := e.LoadDrafter("drafter/"); err != nil { ... } // optional: 2-3× faster, same tokens
//	res, err := e.Generate(ctx, "Once upon a time", redrafter.GenerateOptions{MaxTokens: 64},
//		func(text string) error { fmt.Print(text); return nil })
//
// The CPU backend is always there (Options.Threads sets its worker count).
// A GPU backend is imported for its side effect, which lets
// Options{Backend: "auto"} (the default) pick the GPU. On macOS, Metal:
//
//	import _ "github.com/seed9b8f47b1/redrafter/backend/metal"
//
// On Linux with an NVIDIA GPU, CUDA, built with the tag cuda
// (go build -tags cuda; it loads libcuda.so.1 at run time, without cgo):
//
//	import _ "github.com/seed9b8f47b1/redrafter/backend/cuda"
//
// A Session keeps a conversation's KV cache between turns so a chat re-reads
// only what is new. Session.Chat generates the assistant's reply to a
// conversation of Messages, framed by the model's own Jinja chat template
// (by default, when the checkpoint has one: ModelInfo.Template is "model")
// or a built-in one ("vicuna", the default of a model without a template,
// "llama2", "chatml", "llama3"); send the whole conversation each turn, the
// replies included:
//
//	msgs = append(msgs, redrafter.Message{Role: "user", Content: question})
//	res, err := s.Chat(ctx, msgs, redrafter.ChatOptions{}, onText)
//	msgs = append(msgs, redrafter.Message{Role: "assistant", Content: res.Text})
//
// Engine.ChatTokens measures a conversation against Context (to drop old
// turns before it no longer fits), and Engine.RenderChat shows its text.
//
// Errors, not panics: options without meaning (MaxTokens < 0, a negative
// or NaN temperature, TopK < 0, TopP outside [0, 1]) fail before any work;
// a cancelled or failed generation returns its partial Result (tokens, text
// and stats so far, Reason StopCanceled or StopError) with the error; a
// model whose logits turn NaN or Inf stops with a *NonFiniteError; the
// KV cache is sized against the backend's memory before it is allocated
// (the model's context is lowered to fit, with a warning; a context asked
// for that cannot fit is an error).
//
// Concurrency: the Sessions of one Engine may generate on different
// goroutines at once, over one copy of the weights and of the draft head;
// each Session has its own KV cache and compiled plans, and each draft beam
// search its own draft-step plans and scratch. So may Engine.Generate calls
// (each runs a fresh Session), Engine.NewSession, and the accessors
// (Context, Model, Backend, DraftHead, DefaultBeam, Tokenizer). One Session
// generates on one goroutine at a time (a second Generate or Chat while one
// runs is an error), and its other calls must not overlap a generation,
// except Close: Session.Close and Engine.Close may come from any goroutine
// during generations, which they end (each returns ErrClosed) and wait for
// before they free anything, so neither may be called from a generation's
// own onText. Engine.LoadDrafter must not run concurrently with anything
// else on the Engine. After Close, an Engine's methods and those of its
// Sessions return ErrClosed (Close itself may be repeated). Concurrent
// Sessions share the backend's cores (on the CPU, one pool
// of workers), so they add throughput only where one Session leaves the
// hardware idle; each one's output is what it gives alone.
//
// Sessions that should share the hardware come from a Group
// (Engine.NewGroup, Group.NewSession): while several of them generate, each
// on its own goroutine, their forward passes run together, one pass over the
// new tokens of all of them, so the weights are read once per pass rather
// than once per session (continuous batching; a session joins when its
// Generate starts and leaves when it returns). Each one's tokens are still
// exactly what it gives alone. A member cancelled or failing ends alone; a
// member that does not come back for its next pass within the group's
// straggler wait is left out until it does. Group.Close must not overlap
// its members' generations.
package redrafter
