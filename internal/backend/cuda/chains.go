package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// chains encodes BeamChainsOp and AcceptChainsOp, the ReDrafter step's
// candidate chains.
func (e *encoder) chains() error {
	switch op := e.step.Op.(type) {
	case graph.BeamChainsOp:
		w := e.shape(1)[1]
		e.add(beamChainsLaunch(e.out, e.in[0], e.in[1], w, graph.ChainsLength(e.shape(0)[0], w), op.Depth))
	case graph.AcceptChainsOp:
		e.add(acceptChainsLaunch(e.out, e.in[0], e.in[1], op.Width, graph.ChainsLength(e.shape(0)[0], op.Width)))
	}
	return nil
}

// beamChainsLaunch: BeamChainsOp{Depth: depth} of tree [1+w·(l-1)] and sel
// [3,w] into out [1+w·(l-1)].
func beamChainsLaunch(out, tree, sel devptr, w, l, depth int) *launch {
	return newLaunch("beam_chains_i32", grid1(ceilDiv(1+w*(l-1), 256)), 256).ptr(out).ptr(tree).ptr(sel).i32(w).i32(l).i32(depth)
}

// acceptChainsLaunch: AcceptChainsOp{Width: w} of tokens and argmax
// [1+w·(l-1)] into out [3,l].
func acceptChainsLaunch(out, tokens, argmax devptr, w, l int) *launch {
	return newLaunch("accept_chains_i32", grid1(1), 32).ptr(out).ptr(tokens).ptr(argmax).i32(w).i32(l)
}
