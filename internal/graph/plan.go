package graph

import (
	"fmt"
	"unsafe"
)

// Operand is where a step finds one of its arrays.
type Operand struct {
	Buf   Buffer
	Off   int // byte offset
	DType DType
	Shape Shape
}

// Bytes is the operand's length in bytes.
func (o Operand) Bytes() int { return o.Shape.Numel() * o.DType.Size() }

// Step is one op with its operands, in execution order.
type Step struct {
	Op  Op
	Out Operand
	In  []Operand
}

// Plan is a compiled graph: steps in order, with every intermediate array
// assigned to a buffer the plan owns. Intermediates whose lifetimes do not
// overlap share a buffer. A plan is not safe for concurrent runs.
type Plan struct {
	Steps []Step
	// BackendState lets a backend keep per-plan work (an encoded command
	// list, a captured CUDA graph) between runs. If it has a Release
	// method, Free calls it, so that the backend can release what it holds
	// outside the plan's buffers (a CUDA graph's device resources).
	BackendState any

	be     Backend
	where  []Operand // by node id
	known  []bool
	inputs []Buffer
	// inputAt is, by node id, an input's byte offset in inputs[0] when the
	// backend keeps a plan's inputs in one buffer (an InputBlocker).
	inputAt map[int]int
	slots   []Buffer
	written map[int]bool
}

// Compile plans the evaluation of outs on be. Every array reachable from outs
// is computed; inputs must be written before Run.
func Compile(be Backend, outs ...*Array) (*Plan, error) {
	if len(outs) == 0 {
		return nil, fmt.Errorf("graph: compile: no outputs")
	}
	g := sameGraph(outs...)
	n := len(g.nodes)
	need := needed(n, outs)
	root := storageRoots(g)
	dying := dyingAt(g, need, root, lastUses(g, need, root, outs))

	p := &Plan{be: be, where: make([]Operand, n), known: make([]bool, n), written: map[int]bool{}}
	if ib, ok := be.(InputBlocker); ok {
		if err := p.allocInputBlock(ib, g, need); err != nil {
			return nil, err
		}
	}
	var pool slotPool
	slotOf := make([]int, n) // by storage root: the slot it was given
	for i, a := range g.nodes {
		if !need[i] {
			continue
		}
		if err := p.place(i, a, root, slotOf, &pool); err != nil {
			p.Free()
			return nil, err
		}
		if err := p.addStep(i, a); err != nil {
			p.Free()
			return nil, err
		}
		// Storage whose last reader is this step is free for later steps.
		// An array is never its own reader, so its slot is still distinct
		// from the slots of the inputs it reads.
		for _, r := range dying[i] {
			pool.release(slotOf[r])
		}
	}
	return p, nil
}

// allocInputBlock lays the plan's inputs out in one buffer from the
// backend's AllocInputs, in the order the graph declares them, each at a
// multiple of InputAlign bytes.
func (p *Plan) allocInputBlock(ib InputBlocker, g *Graph, need []bool) error {
	at, size := map[int]int{}, 0
	for i, a := range g.nodes {
		if need[i] && a.kind == kindInput {
			at[i] = size
			size += (a.shape.Numel()*a.dtype.Size() + InputAlign - 1) / InputAlign * InputAlign
		}
	}
	if len(at) == 0 {
		return nil
	}
	b, err := ib.AllocInputs(size)
	if err != nil {
		return fmt.Errorf("graph: %d bytes of inputs: %w", size, err)
	}
	p.inputs, p.inputAt = []Buffer{b}, at
	return nil
}

// needed marks, by node id, what the outputs need: the outputs and every
// node they read, transitively.
func needed(n int, outs []*Array) []bool {
	need := make([]bool, n)
	var mark func(a *Array)
	mark = func(a *Array) {
		if need[a.id] {
			return
		}
		need[a.id] = true
		for _, s := range a.src {
			mark(s)
		}
	}
	for _, o := range outs {
		mark(o)
	}
	return need
}

// storageRoots returns, by node id, the node whose storage each node uses:
// itself unless it is a view or an in-place update of a Var.
func storageRoots(g *Graph) []int {
	root := make([]int, len(g.nodes))
	for i, a := range g.nodes {
		root[i] = i
		switch a.op.(type) {
		case ReshapeOp, SliceOp, KVWriteOp, KVCompactOp:
			root[i] = root[a.src[0].id]
		}
	}
	return root
}

// lastUses returns, by storage root, the last step that reads it; the
// outputs' storage lives past every step (len(g.nodes)).
func lastUses(g *Graph, need []bool, root []int, outs []*Array) []int {
	n := len(g.nodes)
	lastUse := make([]int, n)
	for i, a := range g.nodes {
		if !need[i] {
			continue
		}
		for _, s := range a.src {
			if r := root[s.id]; lastUse[r] < i {
				lastUse[r] = i
			}
		}
	}
	for _, o := range outs {
		lastUse[root[o.id]] = n
	}
	return lastUse
}

// dyingAt lists, by step, the storage roots of computed arrays whose last
// use is that step: their slots are free after it.
func dyingAt(g *Graph, need []bool, root, lastUse []int) map[int][]int {
	n := len(g.nodes)
	dying := make(map[int][]int)
	for i := range g.nodes {
		if need[i] && root[i] == i && g.nodes[i].kind == kindOp && lastUse[i] < n {
			dying[lastUse[i]] = append(dying[lastUse[i]], i)
		}
	}
	return dying
}

// slotPool is the sizes of a plan's intermediate buffers (its slots) and
// which of them are free for the next array.
type slotPool struct {
	sizes []int // by slot
	// free holds released slots in release order. Taking the oldest that
	// fits, rather than the newest, keeps a buffer's next writer as far as
	// possible from its last reader, so a GPU backend needs fewer
	// write-after-read barriers between them.
	free []int
}

// take returns the oldest free slot of at least size bytes, no longer
// free, or -1 when none fits.
func (s *slotPool) take(size int) int {
	for fi, c := range s.free {
		if s.sizes[c] >= size {
			s.free = append(s.free[:fi], s.free[fi+1:]...)
			return c
		}
	}
	return -1
}

// add records a new slot of size bytes, in use, and returns it.
func (s *slotPool) add(size int) int {
	s.sizes = append(s.sizes, size)
	return len(s.sizes) - 1
}

func (s *slotPool) release(slot int) { s.free = append(s.free, slot) }

// place gives node i (a) its storage: a constant's or Var's own buffer, a
// new buffer for an input, its source's storage for a view or in-place
// update, and for any other op a slot, reused from the pool when one fits.
func (p *Plan) place(i int, a *Array, root, slotOf []int, pool *slotPool) error {
	switch {
	case a.kind == kindConst || a.kind == kindVar:
		p.where[i] = Operand{Buf: a.buf, Off: a.off, DType: a.dtype, Shape: a.shape}
	case a.kind == kindInput && p.inputAt != nil:
		p.where[i] = Operand{Buf: p.inputs[0], Off: p.inputAt[i], DType: a.dtype, Shape: a.shape}
	case a.kind == kindInput:
		b, err := p.be.Alloc(a.shape.Numel() * a.dtype.Size())
		if err != nil {
			return fmt.Errorf("graph: input %s: %w", a.name, err)
		}
		p.inputs = append(p.inputs, b)
		p.where[i] = Operand{Buf: b, DType: a.dtype, Shape: a.shape}
	case root[i] != i: // view or in-place update: reuse the source's storage
		src := p.where[a.src[0].id]
		off := src.Off
		if sl, ok := a.op.(SliceOp); ok {
			off += sl.Lo * a.shape[1:].Numel() * a.dtype.Size()
		}
		p.where[i] = Operand{Buf: src.Buf, Off: off, DType: a.dtype, Shape: a.shape}
	default:
		size := a.shape.Numel() * a.dtype.Size()
		s := pool.take(size)
		if s < 0 {
			b, err := p.be.Alloc(size)
			if err != nil {
				return fmt.Errorf("graph: %v: %w", a, err)
			}
			p.slots = append(p.slots, b)
			s = pool.add(size)
		}
		slotOf[i] = s
		p.where[i] = Operand{Buf: p.slots[s], DType: a.dtype, Shape: a.shape}
	}
	p.known[i] = true
	return nil
}

// addStep appends node i's step when it is an op that computes something
// (not a view), once the backend says it supports the op on its operands'
// types.
func (p *Plan) addStep(i int, a *Array) error {
	if a.kind != kindOp || isView(a.op) {
		return nil
	}
	in := make([]Operand, len(a.src))
	dts := make([]DType, len(a.src))
	for j, s := range a.src {
		in[j] = p.where[s.id]
		dts[j] = s.dtype
	}
	if !p.be.Supports(a.op, dts) {
		return fmt.Errorf("graph: backend %s does not support %v on %v", p.be.Name(), a.op, dts)
	}
	p.Steps = append(p.Steps, Step{Op: a.op, Out: p.where[i], In: in})
	return nil
}

// isView reports whether op only reinterprets its source's storage, so that
// no step computes it.
func isView(op Op) bool {
	switch op.(type) {
	case ReshapeOp, SliceOp:
		return true
	}
	return false
}

// Run executes the plan.
func (p *Plan) Run() error { return p.be.Run(p) }

// Operand returns where array a lives in this plan.
func (p *Plan) Operand(a *Array) Operand {
	if a.id >= len(p.known) || !p.known[a.id] {
		panic(fmt.Sprintf("graph: %v is not part of this plan", a))
	}
	return p.where[a.id]
}

// Write sets the contents of input a from a []float32, []int32 or []uint16
// of exactly its size.
func (p *Plan) Write(a *Array, values any) error {
	if a.kind != kindInput {
		panic(fmt.Sprintf("graph: Write to %v, which is not an input", a))
	}
	o := p.Operand(a)
	b := AsBytes(values)
	if len(b) != o.Bytes() {
		panic(fmt.Sprintf("graph: Write of %d bytes to %v", len(b), a))
	}
	return p.be.Write(o.Buf, o.Off, b)
}

// Read copies array a into dst, a []float32, []int32 or []uint16 of exactly its size.
func (p *Plan) Read(a *Array, dst any) error {
	o := p.Operand(a)
	b := AsBytes(dst)
	if len(b) != o.Bytes() {
		panic(fmt.Sprintf("graph: Read of %v into %d bytes", a, len(b)))
	}
	return p.be.Read(o.Buf, o.Off, b)
}

// Free releases the buffers the plan owns. The plan must not be run again.
func (p *Plan) Free() {
	if r, ok := p.BackendState.(interface{ Release() }); ok {
		r.Release()
	}
	p.BackendState = nil
	for _, b := range p.slots {
		p.be.Free(b)
	}
	for _, b := range p.inputs {
		p.be.Free(b)
	}
	p.slots, p.inputs = nil, nil
}

// AsBytes views a []float32, []int32, []uint16, []uint32 or []byte as bytes,
// without copying.
func AsBytes(values any) []byte {
	switch v := values.(type) {
	case []byte:
		return v
	case []float32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	case []int32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	case []uint32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	case []uint16:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 2*len(v))
	}
	panic(fmt.Sprintf("graph: AsBytes of %T", values))
}

// Eval compiles and runs a graph once and frees the plan's buffers after
// calling read, which may Read any of outs. For tests and one-off work; hot
// paths keep their Plans.
func Eval(be Backend, inputs map[*Array]any, read func(p *Plan) error, outs ...*Array) error {
	p, err := Compile(be, outs...)
	if err != nil {
		return err
	}
	defer p.Free()
	for a, v := range inputs {
		if err := p.Write(a, v); err != nil {
			return err
		}
	}
	if err := p.Run(); err != nil {
		return err
	}
	return read(p)
}
