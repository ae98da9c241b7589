// Package apihooks is the back door of package redrafter for the programs,
// tools and tests of this module: the parts of an Engine that measure the
// model or learn from it (a forward pass outside generation, the embedding
// tables, the bytes a decode step reads, the read bandwidth) and that an
// application has no use for. Keeping them here leaves the public API
// (go doc github.com/seed9b8f47b1/redrafter) what an application needs.
//
// Package redrafter sets every hook in its init; this package cannot name
// its types (redrafter imports it), so an engine is passed as an any that
// must hold a *redrafter.Engine: anything else panics.
package apihooks

import "context"

// Probe runs the model's forward pass directly, outside of generation: the
// benchmark times passes of n tokens, and draft-head distillation reads
// every position's hidden state. It owns a KV cache of the engine's
// context, separate from every Session's, and is not safe for concurrent
// use. After its engine's Close, its methods return redrafter.ErrClosed.
type Probe interface {
	// Forward runs tokens through the model as one causal chain after the
	// entries the probe has kept, and writes every position's logits
	// ([len(tokens), vocab]) and final-norm hidden state ([len(tokens),
	// dim]) into the slices that are not nil. Their cache entries are
	// written but not kept: the next Forward overwrites them unless Keep
	// keeps them first.
	Forward(tokens []int32, logits, hidden []float32) error
	// Keep keeps the first n entries of the last Forward in the cache.
	Keep(n int) error
	// Reset empties the cache.
	Reset()
	// Cached is the number of entries kept (0 after Close).
	Cached() int
	// Close releases the probe's cache; closing again does nothing.
	Close()
}

var (
	// NewProbe returns a probe of engine e with an empty cache.
	NewProbe func(e any) (Probe, error)

	// Embeddings returns float32 copies of e's token embedding table and
	// output projection, both [vocab, dim] row-major (quantized weights are
	// dequantized). The draft-head trainer needs them: a draft head embeds
	// tokens with the model's table, and distillation targets come through
	// the model's output projection.
	Embeddings func(e any) (embed, output []float32, err error)

	// DecodeBytes is what one decode step of e reads of the weights, in
	// bytes (the KV cache's reads come on top). Decoding is bound by memory
	// bandwidth: DecodeBytes over the read bandwidth (HostReadBandwidth on
	// the CPU) is the shortest a token can take.
	DecodeBytes func(e any) int64

	// HostReadBandwidth measures this machine's streaming read bandwidth
	// from threads threads, in bytes per second: the best of a few passes
	// of the CPU backend's vector loads over a 1 GiB buffer (larger than
	// any last-level cache), which it allocates for the call. It is the
	// ceiling of decoding on the CPU. Memory bandwidth varies with the
	// machine's state, so measure it in the same run as any rate it is
	// compared with. It takes about a second.
	HostReadBandwidth func(ctx context.Context, threads int) (float64, error)

	// DeviceReadBandwidth returns the probe of e's GPU streaming read
	// bandwidth (bytes per second, measured by a read kernel on the device:
	// the CUDA backend), for the comparison HostReadBandwidth gives on the
	// CPU; nil when the backend has none (the CPU, Metal).
	DeviceReadBandwidth func(e any) func(context.Context) (float64, error)
)
