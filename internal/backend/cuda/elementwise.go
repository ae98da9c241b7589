package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// elementwise encodes SiLUOp, SwiGLUOp, GeGLUOp, SoftCapOp, AddOp and MulOp.
func (e *encoder) elementwise() error {
	switch op := e.step.Op.(type) {
	case graph.SoftCapOp:
		e.add(softcapLaunch(e.out, e.in[0], e.shape(0).Numel(), op.Cap))
	case graph.SiLUOp:
		e.add(siluLaunch(e.out, e.in[0], e.shape(0).Numel()))
	case graph.SwiGLUOp:
		e.add(swigluLaunch(e.out, e.in[0], e.in[1], e.shape(0).Numel()))
	case graph.GeGLUOp:
		e.add(gegluLaunch(e.out, e.in[0], e.in[1], e.shape(0).Numel()))
	case graph.AddOp:
		e.add(binaryLaunch("add_f32", e.out, e.in[0], e.in[1], e.shape(0).Numel(), e.shape(1).Numel()))
	case graph.MulOp:
		e.add(binaryLaunch("mul_f32", e.out, e.in[0], e.in[1], e.shape(0).Numel(), e.shape(1).Numel()))
	}
	return nil
}

// concat encodes ConcatOp along the last dimension.
func (e *encoder) concat() error {
	m, da := lastDim(e.shape(0))
	_, db := lastDim(e.shape(1))
	e.add(concatLaunch(e.out, e.in[0], e.in[1], m, da, db))
	return nil
}

func siluLaunch(out, x devptr, n int) *launch {
	return newLaunch("silu_f32", grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(x).u64(n)
}

func swigluLaunch(out, gate, up devptr, n int) *launch {
	return newLaunch("swiglu_f32", grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(gate).ptr(up).u64(n)
}

func gegluLaunch(out, gate, up devptr, n int) *launch {
	return newLaunch("geglu_f32", grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(gate).ptr(up).u64(n)
}

func softcapLaunch(out, x devptr, n int, cap float32) *launch {
	return newLaunch("softcap_f32", grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(x).u64(n).f32(cap)
}

// binaryLaunch is Add or Mul; b has nb elements, broadcast over a's n.
func binaryLaunch(kernel string, out, a, b devptr, n, nb int) *launch {
	return newLaunch(kernel, grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(a).ptr(b).u64(n).u64(nb)
}

func concatLaunch(out, a, b devptr, m, da, db int) *launch {
	return newLaunch("concat_f32", grid1(ceilDiv(m*(da+db), 256)), 256).ptr(out).ptr(a).ptr(b).i32(m).i32(da).i32(db)
}
