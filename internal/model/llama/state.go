package llama

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// State is one sequence's KV cache on the backend, with the plans compiled
// against it (one per batch shape, reused every step).
type State struct {
	r      *Runner
	cache  []graph.Buffer // per layer: K then V, each [cap, kvHeads, headDim] f32
	cap    int
	len    int
	plans  map[[2]int]*forwardGraph
	kvArrs map[*graph.Graph][]*graph.Array
	// compaction plans by kept count
	compact map[int]*compactGraph
}

// kv returns the graph array of layer l's K (which=0) or V (which=1) cache.
func (s *State) kv(g *graph.Graph, l, which int) *graph.Array {
	arrs := s.kvArrs[g]
	if arrs == nil {
		arrs = make([]*graph.Array, len(s.cache))
		s.kvArrs[g] = arrs
	}
	i := 2*l + which
	if arrs[i] == nil {
		c := &s.r.Model.Config
		arrs[i] = g.Var(fmt.Sprintf("cache.%d.%c", l, "kv"[which]), s.cache[i], 0, s.r.kvType(), c.KVHeads, s.cap, c.HeadDim)
	}
	return arrs[i]
}

// Close frees the cache and the plans.
func (s *State) Close() {
	for _, f := range s.plans {
		f.plan.Free()
	}
	for _, c := range s.compact {
		c.plan.Free()
	}
	for _, b := range s.cache {
		s.r.Backend.Free(b)
	}
	s.plans, s.compact, s.cache = nil, nil, nil
}

// Len is the number of tokens whose keys and values are cached.
func (s *State) Len() int { return s.len }

// Cap is the cache capacity in tokens.
func (s *State) Cap() int { return s.cap }

// Advance keeps the next n cached entries (a chain that was fully accepted).
func (s *State) Advance(n int) {
	if s.len+n > s.cap {
		panic("llama: Advance past the cache")
	}
	s.len += n
}

// Trim forgets every cached entry from position n on.
func (s *State) Trim(n int) {
	if n < 0 || n > s.len {
		panic("llama: Trim outside the cache")
	}
	s.len = n
}
