package graph

import (
	"fmt"
	"strings"
)

// DType is the element type of an array.
type DType uint8

const (
	F32  DType = iota + 1 // IEEE binary32
	F16                   // IEEE binary16, stored as uint16 bits
	BF16                  // bfloat16, stored as uint16 bits
	I32                   // int32 (token ids, positions, indices)
	U32                   // uint32 (packed quantized codes; see DequantizeOp)
	U8                    // bytes (ggml blocks as a GGUF file stores them; see DequantizeBlocksOp)
)

// Size is the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32, I32, U32:
		return 4
	case F16, BF16:
		return 2
	case U8:
		return 1
	}
	panic(fmt.Sprintf("graph: unknown dtype %d", d))
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	case U32:
		return "u32"
	case U8:
		return "u8"
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Shape is a row-major shape, outermost dimension first.
type Shape []int

// Numel is the number of elements.
func (s Shape) Numel() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Equal reports whether two shapes are identical.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// kind says where an array's storage comes from.
type kind uint8

const (
	kindOp    kind = iota // computed by an op; storage assigned by the planner
	kindInput             // written by the caller before each run
	kindConst             // an external buffer the plan reads (weights)
	kindVar               // an external buffer the plan may write (KV cache)
)

// Array is a node of a Graph: an n-dimensional array that is either an input,
// an external buffer, or the result of an op on other arrays.
type Array struct {
	g     *Graph
	id    int
	kind  kind
	name  string
	op    Op
	src   []*Array
	shape Shape
	dtype DType
	buf   Buffer // kindConst and kindVar only
	off   int    // byte offset into buf
}

// Shape returns the array's shape. The caller must not modify it.
func (a *Array) Shape() Shape { return a.shape }

// DType returns the element type.
func (a *Array) DType() DType { return a.dtype }

// Op returns the op that computes the array, or nil for inputs and buffers.
func (a *Array) Op() Op { return a.op }

// Name returns the name given to an input or buffer ("" for op results).
func (a *Array) Name() string { return a.name }

func (a *Array) String() string {
	if a.op != nil {
		return fmt.Sprintf("%s%s%s", a.op, a.dtype, a.shape)
	}
	return fmt.Sprintf("%s%s%s", a.name, a.dtype, a.shape)
}

// Graph records arrays in creation order, which is a topological order.
type Graph struct {
	nodes []*Array
}

// New returns an empty graph.
func New() *Graph { return &Graph{} }

func (g *Graph) add(a *Array) *Array {
	a.g = g
	a.id = len(g.nodes)
	g.nodes = append(g.nodes, a)
	return a
}

// Input declares an array whose contents the caller writes before each run of
// a plan (token ids, positions, the cache length, tree interval ends).
func (g *Graph) Input(name string, dt DType, shape ...int) *Array {
	return g.add(&Array{kind: kindInput, name: name, dtype: dt, shape: cloneShape(shape)})
}

// Const binds an external, read-only buffer (a weight). off is a byte offset.
func (g *Graph) Const(name string, buf Buffer, off int, dt DType, shape ...int) *Array {
	checkExtent(name, buf, off, dt, shape)
	return g.add(&Array{kind: kindConst, name: name, buf: buf, off: off, dtype: dt, shape: cloneShape(shape)})
}

// Var binds an external buffer that ops may write in place (a KV cache). It
// lives as long as its owner, not the plan, and the planner never reuses it.
func (g *Graph) Var(name string, buf Buffer, off int, dt DType, shape ...int) *Array {
	checkExtent(name, buf, off, dt, shape)
	return g.add(&Array{kind: kindVar, name: name, buf: buf, off: off, dtype: dt, shape: cloneShape(shape)})
}

func checkExtent(name string, buf Buffer, off int, dt DType, shape []int) {
	if need := off + Shape(shape).Numel()*dt.Size(); buf == nil || need > buf.Size() {
		panic(fmt.Sprintf("graph: %s%s%v at offset %d does not fit its buffer", name, dt, shape, off))
	}
}

func cloneShape(s []int) Shape {
	for _, d := range s {
		if d <= 0 {
			panic(fmt.Sprintf("graph: non-positive dimension in shape %v", s))
		}
	}
	return append(Shape(nil), s...)
}

// sameGraph panics unless all arrays belong to one graph.
func sameGraph(as ...*Array) *Graph {
	g := as[0].g
	for _, a := range as[1:] {
		if a.g != g {
			panic("graph: arrays from different graphs")
		}
	}
	return g
}

// node creates the result of op on src.
func node(op Op, dt DType, shape Shape, src ...*Array) *Array {
	g := sameGraph(src...)
	return g.add(&Array{kind: kindOp, op: op, src: src, dtype: dt, shape: shape})
}
