package opcases

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// drafterCases are the op cases of the beam search's reductions:
// WarpLogSoftmax and BeamTop, with rows of at most K values (nothing
// masked), K-th values shared by many entries, one and several rows, and
// scores and log-probabilities full of ties, which must go to the lowest
// flat index as on the CPU.
func drafterCases(r *rand.Rand) []Case {
	var cs []Case
	add := func(name string, tol float64, build func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any)) {
		cs = append(cs, Case{Name: name, Tol: tol, Build: build})
	}
	// A masked value near the kept ones keeps the error relative to the
	// output's largest magnitude meaningful (the head uses -50000).
	for _, s := range []struct {
		m, v, k int
		masked  float32
		ties    bool
	}{{1, 1, 50, -3, false}, {2, 33, 5, -3, false}, {3, 1000, 50, -3, false}, {1, 5000, 50, -3, false},
		{2, 50, 50, -3, false}, {3, 64, 7, -3, true}, {2, 300, 50, -3, true}, {1, 777, 50, -50000, false}} {
		x := RandF32(r, s.m*s.v, 2)
		if s.ties {
			for i := range x {
				x[i] = float32(r.IntN(4)) / 2 // the K-th value repeats: all of its copies are kept
			}
		}
		add(fmt.Sprintf("WarpLogSoftmax/M%d_V%d_K%d_masked%g_ties%v", s.m, s.v, s.k, s.masked, s.ties), TolF32,
			func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, s.m, s.v)
				return []*graph.Array{graph.WarpLogSoftmax(xa, s.k, s.masked)}, map[*graph.Array]any{xa: x}
			})
	}
	for _, s := range []struct {
		beams, rows, v, w int
		ties              bool
	}{{1, 1, 1, 1, false}, {3, 1, 100, 3, false}, {4, 4, 257, 4, false}, {2, 2, 33, 5, false}, {5, 5, 31, 2, true},
		{3, 1, 40, 3, true}, {6, 6, 1000, 6, false}, {2, 2, 9, 18, true}} {
		beams := make([]int32, 3*s.beams)
		lp := RandF32(r, s.rows*s.v, 5)
		for b := range s.beams {
			beams[b] = int32(r.IntN(s.beams))     // not read
			beams[s.beams+b] = int32(r.IntN(s.v)) // not read
			score := float32(-r.Float64() * 10)
			if s.ties {
				score = float32(r.IntN(2)) // equal scores across beams
			}
			if b > 0 && s.rows == 1 && !s.ties {
				score = -50000 // a dead beam, as on the first step
			}
			beams[2*s.beams+b] = int32(math.Float32bits(score))
		}
		if s.ties {
			for i := range lp {
				lp[i] = -float32(r.IntN(3)) // equal joint scores: ties go to the lower b·V+t
			}
		}
		add(fmt.Sprintf("BeamTop/B%d_R%d_V%d_W%d_ties%v", s.beams, s.rows, s.v, s.w, s.ties), 0,
			func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ba, la := g.Input("beams", graph.I32, 3, s.beams), g.Input("lp", graph.F32, s.rows, s.v)
				return []*graph.Array{graph.BeamTop(ba, la, s.w)}, map[*graph.Array]any{ba: beams, la: lp}
			})
	}
	return cs
}
