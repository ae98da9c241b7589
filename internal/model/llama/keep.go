package llama

import "github.com/seed9b8f47b1/redrafter/internal/graph"

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
