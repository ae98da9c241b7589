package metal

import "github.com/seed9b8f47b1/redrafter/internal/graph"

// BeamChains: one thread per token. AcceptChains: one threadgroup of
// chainsThreads (W is at most drafter.MaxBeamWidth, 50, in practice).
func (e *encoder) chains() error {
	in, out := e.step.In, e.step.Out
	switch op := e.step.Op.(type) {
	case graph.BeamChainsOp:
		tree, sel := in[0], in[1]
		n, w := tree.Shape[0], sel.Shape[1]
		args := ChainsArgs{N: i32(n), W: i32(w), L: i32(graph.ChainsLength(n, w)), Depth: i32(op.Depth)}
		return e.launch(kernelName("chains", "beam", tree.DType), args, groups1D(n, 256), threads1D(256), nil,
			rd(tree), rd(sel), wr(out))
	case graph.AcceptChainsOp:
		tokens, argmax := in[0], in[1]
		n := tokens.Shape[0]
		args := ChainsArgs{N: i32(n), W: i32(op.Width), L: i32(graph.ChainsLength(n, op.Width))}
		return e.launch(kernelName("chains", "accept", tokens.DType), args, [3]int{1, 1, 1}, threads1D(chainsThreads),
			[]int{sharedBytes(2 * chainsThreads)}, rd(tokens), rd(argmax), wr(out))
	}
	return nil
}
