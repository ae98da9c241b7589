package llama

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// AddKeep adds to g the compaction Keep runs: for every layer's keys and
// values, cache rows kvLen+idx[i] move to kvLen+i (graph.KVCompact; idx
// strictly increasing with idx[i] >= i). It returns the compacted caches,
// to be compiled as outputs. idx may be computed on the device, and rows
// past the accepted path may be moved too: they lie past the new length,
// where the next forward pass overwrites them. The caller advances the
// state (Advance) by the rows it keeps once the plan has run.
func (s *State) AddKeep(g *graph.Graph, kvLen, idx *graph.Array) []*graph.Array {
	var outs []*graph.Array
	for l := range s.r.Model.Layers {
		for which := range 2 {
			outs = append(outs, graph.KVCompact(s.kv(g, l, which), kvLen, idx))
		}
	}
	return outs
}

// Release forgets the cache arrays s made for g (AddForward, AddKeep), once
// g's plan is freed; the plans s compiles itself keep theirs until Close.
func (s *State) Release(g *graph.Graph) { delete(s.kvArrs, g) }

type compactGraph struct {
	plan       *graph.Plan
	kvLen, idx *graph.Array
}

// Keep keeps the entries of the last forward pass at the given tree
// indices (strictly increasing, idx[i] >= i), moving them to
// Len()..Len()+len(idx)-1, and advances Len by len(idx).
func (s *State) Keep(idx []int32) error {
	n := len(idx)
	contiguous := true
	for i, j := range idx {
		contiguous = contiguous && int(j) == i
	}
	if !contiguous {
		cg := s.compact[n]
		if cg == nil {
			g := graph.New()
			cg = &compactGraph{kvLen: g.Input("kv_len", graph.I32, 1), idx: g.Input("keep", graph.I32, n)}
			p, err := graph.Compile(s.r.Backend, s.AddKeep(g, cg.kvLen, cg.idx)...)
			if err != nil {
				return err
			}
			cg.plan = p
			s.compact[n] = cg
		}
		if err := cg.plan.Write(cg.kvLen, []int32{int32(s.len)}); err != nil {
			return err
		}
		if err := cg.plan.Write(cg.idx, idx); err != nil {
			return err
		}
		if err := cg.plan.Run(); err != nil {
			return fmt.Errorf("llama: compacting the cache: %w", err)
		}
	}
	s.Advance(n)
	return nil
}
