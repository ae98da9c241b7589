package opcases

import (
	"fmt"
	"math/rand/v2"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// chainsCases are the op cases of the greedy ReDrafter step's integer ops:
// BeamChains at every depth, with source beams permuted, repeated and out
// of range; AcceptChains with beams agreeing to chosen depths, ties for the
// longest (which must go to the lowest beam, across threads too: W above
// CHAINS_THREADS), and none agreeing at all.
func chainsCases(r *rand.Rand) []Case {
	var cs []Case
	add := func(name string, build func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any)) {
		cs = append(cs, Case{Name: name, Build: build})
	}
	for _, s := range []struct{ w, l, depth int }{{1, 2, 1}, {1, 5, 3}, {3, 4, 1}, {3, 4, 2}, {4, 5, 4}, {7, 3, 2}, {50, 6, 5}, {70, 3, 1}} {
		n := 1 + s.w*(s.l-1)
		tree := RandInts(r, n, 0, 1000)
		sel := RandInts(r, 3*s.w, 0, 1000)
		for i := range s.w {
			sel[i] = int32(r.IntN(s.w+2) - 1) // -1 and W are out of range: the beam keeps its chain
		}
		add(fmt.Sprintf("BeamChains/W%d_L%d_depth%d", s.w, s.l, s.depth), func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			ta, sa := g.Input("tree", graph.I32, n), g.Input("sel", graph.I32, 3, s.w)
			return []*graph.Array{graph.BeamChains(ta, sa, s.depth)}, map[*graph.Array]any{ta: tree, sa: sel}
		})
	}
	for _, s := range []struct {
		w, l, top int
		ties      bool
	}{{1, 2, 1, false}, {1, 5, 2, false}, {2, 3, 2, true}, {4, 5, 3, true}, {4, 5, 4, false}, {9, 4, 0, true}, {50, 5, 4, true}, {70, 3, 1, true}} {
		tokens, argmax := AgreeingChains(r, s.w, s.l, s.top, s.ties)
		n := len(tokens)
		add(fmt.Sprintf("AcceptChains/W%d_L%d_top%d_ties%v", s.w, s.l, s.top, s.ties), func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			ta, aa := g.Input("tokens", graph.I32, n), g.Input("argmax", graph.I32, n)
			return []*graph.Array{graph.AcceptChains(ta, aa, s.w)}, map[*graph.Array]any{ta: tokens, aa: argmax}
		})
	}
	return cs
}

// AgreeingChains returns w beams of length l in the chains layout and an
// argmax under which beam i's drafts agree to a depth drawn for it, at most
// top, which one random beam reaches; with ties, about half the beams do.
func AgreeingChains(r *rand.Rand, w, l, top int, ties bool) (tokens, argmax []int32) {
	c := l - 1
	n := 1 + w*c
	row := func(i, t int) int {
		if t == 0 {
			return 0
		}
		return 1 + i*c + t - 1
	}
	tokens, argmax = RandInts(r, n, 0, 100), RandInts(r, n, 0, 100)
	longest := r.IntN(w)
	for i := range w {
		k := r.IntN(top + 1)
		if i == longest || ties && r.IntN(2) == 0 {
			k = top
		}
		for t := 1; t <= c; t++ {
			want := argmax[row(i, t-1)]
			switch {
			case t <= k:
				tokens[row(i, t)] = want
			case tokens[row(i, t)] == want:
				tokens[row(i, t)] = want + 1 // disagree here
			}
		}
	}
	return tokens, argmax
}
