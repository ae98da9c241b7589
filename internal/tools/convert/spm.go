package convert

import (
	"encoding/binary"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// sentencePieceModel serializes a SentencePiece BPE vocabulary as a
// tokenizer.model (sentencepiece_model.proto ModelProto): the pieces with
// their scores and types, a trainer_spec with the model type (BPE) and the
// special ids, and a normalizer_spec with add_dummy_prefix.
func sentencePieceModel(v *tokenizer.Vocab) []byte {
	var b []byte
	for i, p := range v.Tokens {
		var piece []byte
		piece = appendBytesField(piece, 1, []byte(p))
		score := float32(0)
		if i < len(v.Scores) {
			score = v.Scores[i]
		}
		piece = appendTag(piece, 2, 5)
		piece = binary.LittleEndian.AppendUint32(piece, math.Float32bits(score))
		typ := tokenizer.TypeNormal
		if i < len(v.Types) && v.Types[i] != 0 {
			typ = v.Types[i]
		}
		piece = appendVarintField(piece, 3, uint64(typ))
		b = appendBytesField(b, 1, piece)
	}
	var trainer []byte
	trainer = appendVarintField(trainer, 3, 2) // model_type: BPE
	for _, f := range []struct {
		field int
		id    int32
	}{{40, v.UNK}, {41, v.BOS}, {42, v.EOS}, {43, v.PAD}} {
		trainer = appendVarintField(trainer, f.field, uint64(int64(f.id))) // int32: negative ids sign-extend
	}
	b = appendBytesField(b, 2, trainer)
	var norm []byte
	dummy := uint64(1)
	if v.NoSpacePrefix {
		dummy = 0
	}
	norm = appendVarintField(norm, 3, dummy)
	return appendBytesField(b, 3, norm)
}

func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	return binary.AppendUvarint(appendTag(b, field, 0), v)
}

func appendBytesField(b []byte, field int, p []byte) []byte {
	b = binary.AppendUvarint(appendTag(b, field, 2), uint64(len(p)))
	return append(b, p...)
}
