package metal

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// dispatch is one kernel launch, ready to encode. A plan's dispatches are
// built once and kept in Plan.BackendState; inputs change between runs only
// through buffer contents, never through these fields.
type dispatch struct {
	pipe  pipeline
	grid  [3]int // threadgroups
	group [3]int // threads per threadgroup
	binds []binding
	// shared lists threadgroup memory lengths by index (multiples of 16).
	shared []int

	reads, writes []span

	// step is the graph step this dispatch implements (part of parts); a
	// fake device with a reference backend runs the step on it when it
	// sees the last part.
	step        *graph.Step
	part, parts int
}

// binding is buffer(index): a buffer at an offset, or bytes (setBytes).
type binding struct {
	index int
	buf   *Buffer
	off   int
	n     int  // bytes of the operand at off
	write bool // the kernel writes it
	bytes []byte
}

// span is a byte range of a buffer that a dispatch touches.
type span struct {
	buf    *Buffer
	lo, hi int
}

func (s span) overlaps(t span) bool {
	return s.buf.dev == t.buf.dev && s.lo+s.buf.base < t.hi+t.buf.base && t.lo+t.buf.base < s.hi+s.buf.base
}

func conflicts(a []span, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.overlaps(y) {
				return true
			}
		}
	}
	return false
}

// schedule is where a plan's dispatches get barriers and where command
// buffers end.
type schedule struct {
	barrier []bool // barrier before dispatch i
	commit  []bool // commit after dispatch i
}

// plan decides barriers and commits for ds under policy p:
//
//   - a barrier goes before a dispatch that reads what a dispatch since the
//     last barrier wrote, or writes what one read or wrote (RAW, WAR, WAW);
//     other dispatches run concurrently;
//   - the first command buffer is committed after p.FirstCommit dispatches so
//     the GPU starts while the rest is encoded, later ones after
//     p.OpsPerBuffer dispatches, or (when p.MBPerBuffer is set) once the
//     byte ranges bound in the command buffer reach p.MBPerBuffer MiB, each
//     distinct range counted once: a plan is encoded once and replayed, so
//     there is no growing encode to bound by memory, and counting the whole
//     size of a buffer at every use (as MLX does for a graph it encodes
//     afresh) closed a command buffer after every few large weights;
//     a new command buffer starts with no pending hazards (resources are
//     hazard-tracked across encoders);
//   - the last dispatch always commits.
func planSchedule(ds []*dispatch, p Policy) schedule {
	s := schedule{barrier: make([]bool, len(ds)), commit: make([]bool, len(ds))}
	var reads, writes []span
	ops, bytes, chunk := 0, 0, 0
	bound := map[span]bool{} // ranges counted in this command buffer
	for i, d := range ds {
		if conflicts(d.reads, writes) || conflicts(d.writes, reads) || conflicts(d.writes, writes) {
			s.barrier[i] = true
			reads, writes = reads[:0], writes[:0]
		}
		reads = append(reads, d.reads...)
		writes = append(writes, d.writes...)
		ops++
		for _, b := range d.binds {
			if sp := (span{buf: b.buf, lo: b.off, hi: b.off + b.n}); b.buf != nil && !bound[sp] {
				bound[sp] = true
				bytes += b.n
			}
		}
		limit := p.OpsPerBuffer
		if chunk == 0 {
			limit = p.FirstCommit
		}
		if i == len(ds)-1 || ops >= limit || (p.MBPerBuffer > 0 && bytes>>20 >= p.MBPerBuffer) {
			s.commit[i] = true
			ops, bytes = 0, 0
			clear(bound)
			chunk++
			reads, writes = reads[:0], writes[:0]
		}
	}
	return s
}
