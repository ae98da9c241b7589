package redrafter

// Tokenizer turns text into a model's token ids and back (Engine.Tokenizer).
// It is safe for concurrent use.
type Tokenizer interface {
	// Encode tokenizes text. Control-token text such as "<s>" is not parsed
	// (llama.cpp's parse_special=false); user-defined tokens are. With
	// addBOS the BOS id, if the vocabulary has one, comes first.
	Encode(text string, addBOS bool) []int32
	// EncodeSpecial is Encode that also turns control-token text (the
	// vocabulary's "<s>", "<|im_start|>", …) into those tokens: use it for
	// prompts rendered from a chat template (GenerateOptions.ParseSpecial).
	EncodeSpecial(text string, addBOS bool) []int32
	// Decode turns ids into text. Control tokens print nothing.
	Decode(ids []int32) string
	// VocabSize is the number of ids.
	VocabSize() int
	// BOS and EOS are the begin/end-of-sequence ids, -1 if none.
	BOS() int32
	EOS() int32
}

// Tokenizer returns the model's tokenizer.
func (e *Engine) Tokenizer() Tokenizer { return e.tok }
