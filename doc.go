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
// The CPU backend is always there. On macOS, import the Metal backend for its
// side effect to let Options{Backend: "auto"} (the default) pick the GPU:
//
//	import _ "github.com/seed9b8f47b1/redrafter/backend/metal"
//
// An Engine is safe for use by one goroutine at a time; a Session keeps a
// conversation's KV cache between turns so a chat re-reads only what is new.
//
// Tools that measure or train against the model (benchmarks, draft-head
// distillation) use the narrow hooks Engine.NewProbe, Engine.Embeddings,
// Engine.Model and Engine.DraftHead rather than the model's internals.
package redrafter
