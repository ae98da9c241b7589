package redrafter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

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

// Load a model and describe it. Options left zero pick the backend ("auto":
// Metal on Apple Silicon when the binary imports it, else the CPU), the
// model's context and the backend's KV cache type.
func ExampleLoad() {
	e, err := redrafter.Load("models/stories260K/stories260K.gguf", redrafter.Options{Backend: "cpu", Context: 256})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	m := e.Model()
	fmt.Println(m.Arch, m.Layers, "layers,", m.Vocab, "tokens,", e.Context(), "context,", e.Backend())
	// Output:
	// llama 5 layers, 512 tokens, 256 context, cpu
}

// Stream a generation: onText gets each piece as soon as it is decided
// (never half a UTF-8 character, never part of a stop string), and an
// error it returns stops the generation. Here it stops at the first full
// stop; the Result holds what was produced up to there.
func ExampleEngine_Generate() {
	e, err := redrafter.Load("models/stories260K/stories260K.gguf", redrafter.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	errEnough := errors.New("enough")
	res, err := e.Generate(context.Background(), "Once upon a time", redrafter.GenerateOptions{MaxTokens: 64},
		func(piece string) error {
			fmt.Printf("[%s]", piece)
			if strings.Contains(piece, ".") {
				return errEnough
			}
			return nil
		})
	fmt.Println()
	fmt.Println(errors.Is(err, errEnough), res.Reason, len(res.Tokens), "tokens")
	// Output:
	// [,][ there][ was][ a][ little][ g][ir][l][ named][ Lily][.]
	// true error 11 tokens
}

// ReDrafter: with a draft head loaded every generation drafts beams and
// verifies them in one forward pass, unless Draft.Off says not to. Greedy
// text is the same as without the head; Stats.Draft counts the steps.
func ExampleDraftOptions() {
	e, err := redrafter.Load("models/stories260K/stories260K.gguf", redrafter.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	opt := redrafter.GenerateOptions{MaxTokens: 48, Draft: redrafter.DraftOptions{BeamWidth: 2, BeamLength: 4}}
	drafted, err := e.Generate(ctx, "Once upon a time", opt, nil)
	if err != nil {
		log.Fatal(err)
	}
	opt.Draft.Off = true
	plain, err := e.Generate(ctx, "Once upon a time", opt, nil)
	if err != nil {
		log.Fatal(err)
	}
	st := drafted.Stats
	fmt.Println("same text:", drafted.Text == plain.Text)
	fmt.Printf("%d tokens in %d steps of a %dx%d beam, %.2f tokens per step\n",
		st.GeneratedTokens, st.Draft.Steps, st.BeamWidth, st.BeamLength, st.Draft.TokensPerStep())
	fmt.Println("autoregressive has no draft stats:", plain.Stats.Draft == nil)
	// Output:
	// same text: true
	// 48 tokens in 12 steps of a 2x4 beam, 3.92 tokens per step
	// autoregressive has no draft stats: true
}

// A chat: send the whole conversation each turn to Session.Chat, which
// frames it with the model's chat template (the demo model names none, so
// vicuna; ModelInfo.Template says which) and generates the reply. The
// session's KV cache keeps what earlier turns computed, and a turn runs
// only what follows the longest prefix its prompt shares with the cache:
// here the second turn reuses the first prompt's 41 tokens and runs 52 of
// its 93 (the reply is re-read, since the template frames it differently
// from how it was generated).
func ExampleSession_Chat() {
	e, err := redrafter.Load("models/stories260K/stories260K.gguf", redrafter.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	s, err := e.NewSession()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	opt := redrafter.ChatOptions{GenerateOptions: redrafter.GenerateOptions{MaxTokens: 24}} // Template "": the model's, else vicuna
	msgs := []redrafter.Message{{Role: "system", Content: "You tell short stories."}}
	for _, question := range []string{"Who is Lily?", "What does she like?"} {
		msgs = append(msgs, redrafter.Message{Role: "user", Content: question})
		res, err := s.Chat(context.Background(), msgs, opt, nil)
		if err != nil {
			log.Fatal(err)
		}
		msgs = append(msgs, redrafter.Message{Role: "assistant", Content: res.Text})
		fmt.Printf("%s %q (%d prompt tokens run, %d cached)\n", question, res.Text, res.Stats.PromptTokens, len(s.Tokens()))
	}
	// Output:
	// Who is Lily? " Whiskers is a shiny shiny shiny sh" (41 prompt tokens run, 64 cached)
	// What does she like? "\" said Rose.\n\"OK,\" reversed the shiny s" (52 prompt tokens run, 117 cached)
}
