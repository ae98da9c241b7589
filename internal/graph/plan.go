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
	// list, a captured CUDA graph) between runs.
	BackendState any

	be      Backend
	where   []Operand // by node id
	known   []bool
	inputs  []Buffer
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

	// Mark what the outputs need.
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

	// root[i] is the node whose storage node i uses (itself unless it is a view
	// or an in-place update of a Var).
	root := make([]int, n)
	for i, a := range g.nodes {
		root[i] = i
		switch a.op.(type) {
		case ReshapeOp, SliceOp, KVWriteOp, KVCompactOp:
			root[i] = root[a.src[0].id]
		}
	}
	// lastUse[r] is the last step that reads storage r; outputs live forever.
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

	p := &Plan{be: be, where: make([]Operand, n), known: make([]bool, n), written: map[int]bool{}}
	type slot struct {
		buf  Buffer
		size int
	}
	// free holds released slots in release order. Taking the oldest that
	// fits, rather than the newest, keeps a buffer's next writer as far as
	// possible from its last reader, so a GPU backend needs fewer
	// write-after-read barriers between them.
	var free []int
	var sizes []int
	slotOf := make([]int, n)
	release := func(s int) { free = append(free, s) }
	// dying[i] lists storage roots whose last use is step i.
	dying := make(map[int][]int)
	for i := range g.nodes {
		if need[i] && root[i] == i && g.nodes[i].kind == kindOp && lastUse[i] < n {
			dying[lastUse[i]] = append(dying[lastUse[i]], i)
		}
	}

	fail := func(err error) (*Plan, error) {
		p.Free()
		return nil, err
	}
	for i, a := range g.nodes {
		if !need[i] {
			continue
		}
		switch {
		case a.kind == kindConst || a.kind == kindVar:
			p.where[i] = Operand{Buf: a.buf, Off: a.off, DType: a.dtype, Shape: a.shape}
		case a.kind == kindInput:
			b, err := be.Alloc(a.shape.Numel() * a.dtype.Size())
			if err != nil {
				return fail(fmt.Errorf("graph: input %s: %w", a.name, err))
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
			s := -1
			for fi, c := range free {
				if sizes[c] >= size {
					s = c
					free = append(free[:fi], free[fi+1:]...)
					break
				}
			}
			if s < 0 {
				b, err := be.Alloc(size)
				if err != nil {
					return fail(fmt.Errorf("graph: %v: %w", a, err))
				}
				p.slots = append(p.slots, b)
				sizes = append(sizes, size)
				s = len(p.slots) - 1
			}
			slotOf[i] = s
			p.where[i] = Operand{Buf: p.slots[s], DType: a.dtype, Shape: a.shape}
		}
		p.known[i] = true
		if a.kind == kindOp {
			if !isView(a.op) {
				in := make([]Operand, len(a.src))
				dts := make([]DType, len(a.src))
				for j, s := range a.src {
					in[j] = p.where[s.id]
					dts[j] = s.dtype
				}
				if !be.Supports(a.op, dts) {
					return fail(fmt.Errorf("graph: backend %s does not support %v on %v", be.Name(), a.op, dts))
				}
				p.Steps = append(p.Steps, Step{Op: a.op, Out: p.where[i], In: in})
			}
		}
		// Storage whose last reader is this step is free for later steps.
		// An array is never its own reader, so its slot is still distinct
		// from the slots of the inputs it reads.
		for _, r := range dying[i] {
			release(slotOf[r])
		}
	}
	return p, nil
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
