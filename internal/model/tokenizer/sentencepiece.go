package tokenizer

import (
	"errors"
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// LoadSentencePiece reads a SentencePiece tokenizer.model (a serialized
// sentencepiece ModelProto) of a BPE model, as Llama 1/2, Vicuna and Mistral
// ship it.
func LoadSentencePiece(path string) (*Vocab, error) {
	data, err := formats.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	v, err := parseSentencePiece(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return v, nil
}

// Field numbers of sentencepiece_model.proto that we read.
const (
	pbModelPieces     = 1 // ModelProto.pieces: repeated SentencePiece
	pbModelTrainer    = 2 // ModelProto.trainer_spec
	pbModelNormalizer = 3 // ModelProto.normalizer_spec
	pbPieceText       = 1 // SentencePiece.piece
	pbPieceScore      = 2 // SentencePiece.score (float)
	pbPieceType       = 3 // SentencePiece.type (enum, default NORMAL = 1)
	pbTrainerType     = 3 // TrainerSpec.model_type (UNIGRAM = 1, BPE = 2, …)
	pbTrainerUNK      = 40
	pbTrainerBOS      = 41
	pbTrainerEOS      = 42
	pbTrainerPAD      = 43
	pbNormDummyPrefix = 3 // NormalizerSpec.add_dummy_prefix (default true)

	spmTypeBPE = 2
)

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// parseSentencePiece parses the bytes of a tokenizer.model. Errors do not
// carry the "tokenizer:" prefix; LoadSentencePiece adds it with the path.
func parseSentencePiece(data []byte) (*Vocab, error) {
	v := &Vocab{Model: ModelSPM, BOS: 1, EOS: 2, UNK: 0, PAD: -1, AddBOS: true}
	modelType := int64(spmTypeBPE) // a file without a trainer_spec is taken as BPE
	err := walkProto(data, func(field int, wire int, val uint64, b []byte) error {
		switch {
		case field == pbModelPieces && wire == wireBytes:
			piece, score, typ := "", float32(0), int32(TypeNormal)
			err := walkProto(b, func(f int, w int, val uint64, b []byte) error {
				switch {
				case f == pbPieceText && w == wireBytes:
					piece = string(b)
				case f == pbPieceScore && w == wireFixed32:
					score = math.Float32frombits(uint32(val))
				case f == pbPieceType && w == wireVarint:
					if val < 1 || val > uint64(TypeByte) {
						return fmt.Errorf("piece %d: type %d out of range", len(v.Tokens), val)
					}
					typ = int32(val)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("piece %d: %w", len(v.Tokens), err)
			}
			v.Tokens = append(v.Tokens, piece)
			v.Scores = append(v.Scores, score)
			v.Types = append(v.Types, typ)
		case field == pbModelTrainer && wire == wireBytes:
			modelType = 1 // proto default: UNIGRAM
			return walkProto(b, func(f int, w int, val uint64, _ []byte) error {
				if w != wireVarint {
					return nil
				}
				switch f {
				case pbTrainerType:
					modelType = int64(val)
				case pbTrainerUNK:
					v.UNK = int32(val)
				case pbTrainerBOS:
					v.BOS = int32(val)
				case pbTrainerEOS:
					v.EOS = int32(val)
				case pbTrainerPAD:
					v.PAD = int32(val)
				}
				return nil
			})
		case field == pbModelNormalizer && wire == wireBytes:
			return walkProto(b, func(f int, w int, val uint64, _ []byte) error {
				if f == pbNormDummyPrefix && w == wireVarint {
					v.NoSpacePrefix = val == 0
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if modelType != spmTypeBPE {
		return nil, fmt.Errorf("sentencepiece model type %d not supported (only BPE = %d)", modelType, spmTypeBPE)
	}
	if len(v.Tokens) == 0 {
		return nil, errors.New("no pieces")
	}
	for _, id := range []*int32{&v.BOS, &v.EOS, &v.UNK, &v.PAD} {
		if *id < -1 || int(*id) >= len(v.Tokens) {
			*id = -1 // negative ids are "none" in sentencepiece; others are unusable
		}
	}
	return v, nil
}

// walkProto calls fn for each field of a protobuf message: varint and fixed
// values in val, length-delimited payloads in b (a subslice of data).
func walkProto(data []byte, fn func(field, wire int, val uint64, b []byte) error) error {
	for i := 0; i < len(data); {
		key, n := uvarint(data[i:])
		if n <= 0 {
			return fmt.Errorf("offset %d: bad field key", i)
		}
		i += n
		field, wire := int(key>>3), int(key&7)
		if field == 0 || key>>3 > math.MaxInt32 {
			return fmt.Errorf("offset %d: bad field number %d", i-n, key>>3)
		}
		var (
			val uint64
			b   []byte
		)
		switch wire {
		case wireVarint:
			val, n = uvarint(data[i:])
			if n <= 0 {
				return fmt.Errorf("offset %d: field %d: bad varint", i, field)
			}
			i += n
		case wireFixed64:
			if len(data)-i < 8 {
				return fmt.Errorf("offset %d: field %d: truncated fixed64", i, field)
			}
			for k := 7; k >= 0; k-- {
				val = val<<8 | uint64(data[i+k])
			}
			i += 8
		case wireFixed32:
			if len(data)-i < 4 {
				return fmt.Errorf("offset %d: field %d: truncated fixed32", i, field)
			}
			val = uint64(data[i]) | uint64(data[i+1])<<8 | uint64(data[i+2])<<16 | uint64(data[i+3])<<24
			i += 4
		case wireBytes:
			l, n := uvarint(data[i:])
			if n <= 0 {
				return fmt.Errorf("offset %d: field %d: bad length", i, field)
			}
			i += n
			if l > uint64(len(data)-i) {
				return fmt.Errorf("offset %d: field %d: length %d exceeds the %d bytes left", i, field, l, len(data)-i)
			}
			b = data[i : i+int(l)]
			i += int(l)
		default:
			return fmt.Errorf("offset %d: field %d: unsupported wire type %d", i, field, wire)
		}
		if err := fn(field, wire, val, b); err != nil {
			return err
		}
	}
	return nil
}

// uvarint decodes a base-128 varint of at most 10 bytes; n <= 0 on error.
func uvarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1 // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}
