// Package quant holds the number formats weights are stored in, with their
// scalar reference conversions: IEEE half precision and bfloat16; MLX's
// affine 2/4/8-bit format (codes packed in uint32 words, a scale and bias per
// group), which every backend computes with; and ggml's block formats
// (Q4_0 … Q6_K, IQ4_NL, IQ4_XS), dequantized as ggml defines them (which
// the CPU does on the fly) or converted exactly to the affine form. It is a leaf: it imports nothing of ours, so the format
// readers and every backend share one definition of each format.
package quant
