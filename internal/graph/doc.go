// Package graph is the seam between model code and the hardware: lazy arrays,
// the typed ops a Llama forward pass and the ReDrafter head need, a planner
// that orders the nodes and assigns buffers, and the Backend interface that
// runs a plan.
//
// Model code builds a Graph once per shape (inputs such as token ids,
// positions and the cache length are Input arrays whose values are written
// before each run), compiles it into a Plan, and runs the Plan many times. The
// Plan is what a backend sees: an ordered list of steps, each an Op with its
// operand buffers. A CPU backend calls a kernel per step; a GPU backend encodes
// the whole list into command buffers and waits once.
//
// Each op has one name: the function that builds it (RoPE, Attention,
// KVWrite, MatMul, ...) and, with an Op suffix, the type backends switch on
// (RoPEOp, AttentionOp, ...), whose String is the bare name. Quantized
// declares an affine-quantized weight; MatMul and Embed of one build
// QMatMulOp and QEmbedOp.
//
// Shapes are row-major, outermost dimension first, as in PyTorch. A shape bug
// in a graph builder is a programmer error and panics with both shapes; errors
// from the environment (allocation, a backend that lacks an op) are returned.
//
// Attention has one description for every case: a prefix every query sees
// (the cache entries before the new tokens) plus a tree over the N new tokens
// laid out in DFS pre-order, given as interval ends: new query q sees new key
// k iff k <= q <= end[k]. A chain (end[k] = N-1) is causal prefill, N = 1 is
// decode, and a packed set of draft beams is ReDrafter verification. The
// metadata is O(N); no N×N mask exists anywhere.
package graph
