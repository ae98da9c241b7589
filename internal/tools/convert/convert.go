// Package convert writes quantized checkpoints: it reads a model (an HF
// checkpoint directory or a GGUF file) or a ReDrafter draft head and writes
// an HF-style directory in MLX's affine-quantized layout (package quant),
// which mlx-lm and this runtime's loaders read as they read mlx-community
// checkpoints:
//
//   - every quantized Linear or Embedding <path> is stored as
//     <path>.weight (U32 [out, in·bits/32]), <path>.scales and
//     <path>.biases ([out, in/group_size], F16, or BF16 for a bf16 model);
//   - config.json carries "quantization" (and, as newer mlx-lm writes,
//     "quantization_config") = {"group_size": g, "bits": b}, with
//     "<path>": false for every matrix left unquantized;
//   - norms and biases keep their dtype; matrices that are kept (by
//     request, or because their rows are not whole groups) are stored as
//     F16 (BF16 for a bf16 model).
//
// Quantization is MLX's round-to-nearest with per-group min/max
// (quant.AffineParams). A GGUF input is converted to HF names and, for the
// llama architecture, its Q and K rows are put back in HF's rotate-half
// order (llama.cpp's converter interleaves them); its SentencePiece
// vocabulary becomes a tokenizer.model. Outputs are written to a temporary
// directory beside the destination and renamed into place, so an error
// leaves nothing half written.
package convert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Options say how to quantize.
type Options struct {
	// Bits is 4 or 8 for affine quantization, or 16 (f16) or 32 (f32) to
	// convert without quantizing.
	Bits int
	// GroupSize is 32, 64 or 128 (affine only).
	GroupSize int
	// Keep lists matrices to leave unquantized (stored as f16): module paths
	// ("lm_head", "model.layers.0.mlp.down_proj"), a trailing component
	// ("down_proj" matches it in every layer), or the aliases "embed" (the
	// token embedding) and "vocab" (a draft head's vocabulary projection).
	Keep []string
	// Force replaces an existing output directory; without it, an existing
	// output is an error (ErrExists).
	Force bool
	// Progress, if set, is called before each tensor is encoded.
	Progress func(done, total int, name, what string)
}

func (o *Options) check() error {
	switch o.Bits {
	case 4, 8:
		if !quant.AffineGroupSize(o.GroupSize) {
			return fmt.Errorf("convert: group size %d (want 32, 64 or 128)", o.GroupSize)
		}
	case 16, 32:
	default:
		return fmt.Errorf("convert: %d bits (want 4 or 8, or 16 or 32 to convert without quantizing)", o.Bits)
	}
	return nil
}

// quantized reports whether the options quantize at all.
func (o *Options) quantized() bool { return o.Bits == 4 || o.Bits == 8 }

// kept reports whether module path (a weight name without ".weight") is to
// stay unquantized by request. alias is "embed", "vocab" or "".
func (o *Options) kept(path, alias string) bool {
	for _, k := range o.Keep {
		k = strings.TrimSuffix(strings.TrimSpace(k), ".weight")
		if k == "" {
			continue
		}
		if k == path || strings.HasSuffix(path, "."+k) || (alias != "" && k == alias) ||
			(k == "embed" && strings.HasSuffix(path, "embed_tokens")) {
			return true
		}
	}
	return false
}

// keepAliases are the Keep names that need not match a matrix of every
// input: a tied model has no lm_head, a draft head no embedding.
var keepAliases = []string{"lm_head", "embed", "vocab"}

// checkKeep fails if an entry of Keep other than an alias names none of
// the matrices (module paths) about to be written: a misspelt name would
// otherwise quantize what the user meant to keep.
func (o *Options) checkKeep(paths []string) error {
	for _, k := range o.Keep {
		k = strings.TrimSuffix(strings.TrimSpace(k), ".weight")
		if k == "" || slices.Contains(keepAliases, k) {
			continue
		}
		if !slices.ContainsFunc(paths, func(p string) bool { return p == k || strings.HasSuffix(p, "."+k) }) {
			return fmt.Errorf("convert: keep %q names no matrix of the input: give lm_head, embed, vocab, a module path (%s) or its last part (%s)",
				k, paths[0], paths[0][strings.LastIndex(paths[0], ".")+1:])
		}
	}
	return nil
}

// counts summarises what was written.
type counts struct {
	quantized, kept int
	skipped         []string // matrices whose rows are not whole groups
	bytes           int64
}

// Summary describes a finished conversion.
type Summary struct {
	Tensors   int      // matrices written
	Quantized int      // of which quantized
	Skipped   []string // matrices left in float because their rows are not whole groups
	Bytes     int64    // bytes of tensor data written
}

func (c *counts) summary() Summary {
	return Summary{Tensors: c.quantized + c.kept, Quantized: c.quantized, Skipped: c.skipped, Bytes: c.bytes}
}
