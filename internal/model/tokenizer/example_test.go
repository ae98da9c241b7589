package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

func Example() {
	v, err := tokenizer.LoadSentencePiece("testdata/tokenizer.model")
	if err != nil {
		log.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("Hello world", v.AddBOS)
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids))
	// Output:
	// [1 15043 3186]
	// "Hello world"
}

func ExampleRenderChat() {
	prompt, err := tokenizer.RenderChat(tokenizer.TemplateLlama2, []tokenizer.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Hi!"},
	}, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", prompt)
	// Output:
	// "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi! [/INST]"
}

func ExampleStreamDecoder() {
	v, err := tokenizer.LoadSentencePiece("testdata/tokenizer.model")
	if err != nil {
		log.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		log.Fatal(err)
	}
	d := tokenizer.NewStreamDecoder(tok)
	for _, id := range tok.Encode("Llama 🦙!", true) {
		fmt.Printf("%s %q\n", tok.Piece(id), d.Add(id))
	}
	fmt.Printf("flush %q\n", d.Flush())
	// Output:
	// <s> ""
	// ▁L "L"
	// l "l"
	// ama "ama"
	// ▁ " "
	// <0xF0> ""
	// <0x9F> ""
	// <0xA6> ""
	// <0x99> "🦙"
	// ! "!"
	// flush ""
}
