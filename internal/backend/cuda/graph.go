package cuda

import (
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// A plan's launches have fixed device pointers, and everything that
// changes per token lives in device buffers, so after its first Run a
// plan is replayed as one CUDA graph: one kernel node per launch, with an
// edge wherever two launches touch the same bytes and one of them writes
// (RAW, WAR, WAW). Launches without such an edge between them may run
// concurrently on the GPU, which is what lets a graph hide the ramp and
// tail of small kernels.

// span is a byte range [lo, hi) of device memory. Allocations never
// overlap, so two spans overlap only when they lie in the same buffer.
type span struct{ lo, hi devptr }

func (s span) overlaps(t span) bool { return s.lo < t.hi && t.lo < s.hi }

// access is what one step's launches read and write: its inputs' spans,
// and its result's plus those of the sources it writes in place
// (graph.WrittenSources). Only the plan's operands are used, never what
// an op does, so new ops (fused ones) get their hazards right as long as
// WrittenSources names what they write.
type access struct{ reads, writes []span }

func operandSpan(o graph.Operand) span {
	x := o.Buf.(*Buffer) // the encoder checked every operand is ours
	lo := x.ptr + devptr(o.Off)
	return span{lo, lo + devptr(o.Bytes())}
}

func stepAccess(s *graph.Step) access {
	var a access
	for _, o := range s.In {
		if o.Bytes() > 0 {
			a.reads = append(a.reads, operandSpan(o))
		}
	}
	if s.Out.Bytes() > 0 {
		a.writes = append(a.writes, operandSpan(s.Out))
	}
	for _, i := range graph.WrittenSources(s.Op) {
		if i < len(s.In) && s.In[i].Bytes() > 0 {
			a.writes = append(a.writes, operandSpan(s.In[i]))
		}
	}
	return a
}

func anyOverlap(a, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.overlaps(y) {
				return true
			}
		}
	}
	return false
}

// conflict reports whether a must finish before b starts when a comes
// first: b reads what a writes, or writes what a reads or writes.
func conflict(a, b access) bool {
	return anyOverlap(a.writes, b.reads) || anyOverlap(a.reads, b.writes) || anyOverlap(a.writes, b.writes)
}

// hazardDeps returns, for each launch i (in plan order), the earlier
// launches its graph node depends on. step[i] is the step of launch i and
// acc the steps' accesses. A step's own launches are chained (each may
// read what the previous wrote, in scratch the step's operands do not
// show). Otherwise i depends on the most recent earlier launches it
// conflicts with, skipping those already ordered before i through another
// dependency: scanning backwards, a conflicting launch that is an ancestor
// of one already chosen needs no edge of its own. The result has the same
// orderings as an edge for every conflicting pair, with far fewer edges.
func hazardDeps(step []int, acc []access) [][]int {
	n := len(step)
	words := (n + 63) / 64
	anc := make([]uint64, n*words) // anc[i*words:] is the set of i's ancestors
	deps := make([][]int, n)
	for i := range n {
		ai := anc[i*words : (i+1)*words]
		add := func(j int) {
			deps[i] = append(deps[i], j)
			ai[j/64] |= 1 << (j % 64)
			for w, v := range anc[j*words : (j+1)*words] {
				ai[w] |= v
			}
		}
		if i > 0 && step[i-1] == step[i] {
			add(i - 1)
		}
		for j := i - 1; j >= 0; j-- {
			if ai[j/64]&(1<<(j%64)) != 0 {
				continue
			}
			if conflict(acc[step[j]], acc[step[i]]) {
				add(j)
			}
		}
		// Dependencies in plan order: the driver gets them as it would
		// from a capture, and tests read them that way.
		slices.Sort(deps[i])
	}
	return deps
}

// graphNode is one kernel node: its launch and the nodes (by index, all
// earlier) it depends on.
type graphNode struct {
	l    *launch
	deps []int
}

// graphExec is an instantiated graph, replayed by launch on the backend's
// stream (inside enter/exit) and released by destroy.
type graphExec interface {
	launch() error
	destroy()
}

// buildGraph turns a plan's launches into an instantiated graph.
func (b *Backend) buildGraph(st *planState) (graphExec, error) {
	deps := hazardDeps(st.launchStep, st.access)
	nodes := make([]graphNode, len(st.launches))
	for i, l := range st.launches {
		nodes[i] = graphNode{l: l, deps: deps[i]}
	}
	return b.drv.newGraph(nodes)
}
