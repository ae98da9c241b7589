package redrafter_test

import (
	"context"
	"fmt"
	"log"

	"github.com/seed9b8f47b1/redrafter"
)

// The README's example: load a model and a draft head, then stream a
// greedy continuation. With the draft head the text is the same as without
// it, only faster.
func Example() {
	ctx := context.Background()
	e, err := redrafter.Load("models/stories260K/stories260K.gguf", redrafter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
		log.Fatal(err)
	}
	prompt := "Once upon a time"
	fmt.Print(prompt)
	res, err := e.Generate(ctx, prompt, redrafter.GenerateOptions{MaxTokens: 16},
		func(text string) error { fmt.Print(text); return nil })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n%d tokens, %s\n", len(res.Tokens), res.Reason)
	// Output:
	// Once upon a time, there was a little girl named Lily. She loved to play
	// 16 tokens, length
}
