// Package quant holds the number formats weights are stored in: IEEE half
// precision, bfloat16 and (later) the block-quantized formats, with their
// scalar reference conversions. It is a leaf: it imports nothing of ours, so
// formats readers and every backend can share one definition of each format.
package quant
