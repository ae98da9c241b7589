// Package runtime is the public Go API of redrafter: load a model (and,
// optionally, a ReDrafter draft head), then generate text from it with
// streaming, cancellation through context.Context, and statistics.
//
//	e, err := runtime.Load("model.gguf", runtime.Options{})
//	if err != nil { ... }
//	defer e.Close()
//	res, err := e.Generate(ctx, "Once upon a time", runtime.GenerateOptions{MaxTokens: 64},
//		func(text string) error { fmt.Print(text); return nil })
//
// An Engine is safe for use by one goroutine at a time; a Session keeps a
// conversation's KV cache between turns so a chat re-reads only what is new.
package redrafter
