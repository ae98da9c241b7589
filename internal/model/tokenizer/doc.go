// Package tokenizer turns text into Llama-family token ids and back: SentencePiece
// BPE (Llama 1/2, Vicuna, Mistral) and GPT-2 byte-level BPE (Llama 3, Qwen2/3).
//
// Every source is first turned into a plain [Vocab]: GGUF metadata
// ([FromGGUFMetadata], keys tokenizer.ggml.*), a SentencePiece tokenizer.model
// ([LoadSentencePiece]) or a Hugging Face tokenizer.json ([LoadHF]). [New]
// builds a [Tokenizer] from it.
//
// SentencePiece models ("llama") follow llama.cpp's llm_tokenizer_spm and
// sentencepiece's bpe_model.cc: spaces become "▁", a dummy-prefix "▁" is
// prepended, adjacent symbols are merged highest piece score first (leftmost on
// ties) while the merged text is a piece, and characters left without a piece
// fall back to <0xXX> byte pieces. A tokenizer.json in this form (BPE with
// byte_fallback) is merged by merge rank instead of score, as the HF library does.
// Byte-level models ("gpt2") split text with the pre-tokenizer regexes
// (github.com/dlclark/regexp2, for the \s+(?!\S) lookahead), map each byte to a
// printable rune (GPT-2's bytes_to_unicode) and merge lowest rank first.
//
// [Tokenizer.Encode] does not parse special-token text: "<s>" in user text is
// three ordinary pieces, as in llama.cpp with parse_special=false.
// User-defined (added, non-special) tokens are always matched whole.
// [Tokenizer.EncodeSpecial] also matches control tokens. A chat prompt is
// encoded from [RenderChatParts] by [Tokenizer.EncodeParts]: control tokens
// only in the template's markup ("<|im_start|>", "<s>"), the messages' text
// plain, so content cannot forge a turn. A model's own Jinja chat template
// ([CompileTemplate], github.com/ardanlabs/jinja) renders into the same parts
// with [Template.RenderParts]: see there how the markup is told apart from
// content the template trims or splits.
//
// [Tokenizer.Decode] returns valid UTF-8: control tokens print nothing, byte
// pieces are joined into characters, and a byte sequence that is not UTF-8
// becomes U+FFFD per byte. For SentencePiece it drops the space of the dummy
// prefix from the first piece only. [StreamDecoder] produces the same text one
// token at a time without ever splitting a character.
//
// A Tokenizer is immutable after [New] and safe for concurrent use.
package tokenizer
