package cuda

import (
	"encoding/binary"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// rope encodes RoPEOp; the inverse frequencies go to the device once, as
// a constant.
func (e *encoder) rope(op graph.RoPEOp) error {
	freq := make([]byte, 4*len(op.InvFreq))
	for j, f := range op.InvFreq {
		binary.LittleEndian.PutUint32(freq[4*j:], math.Float32bits(f))
	}
	fp, err := e.b.constant(freq)
	if err != nil {
		return err
	}
	x := e.shape(0)
	e.add(ropeLaunch(e.out, e.in[0], e.in[1], fp, op.NeoX, x[0], x[1], x[2], len(op.InvFreq)))
	return nil
}

// ropeLaunch: invFreq is a device copy of the op's inverse frequencies.
func ropeLaunch(out, x, pos, invFreq devptr, neox bool, m, h, d, p int) *launch {
	name := "rope_adjacent_f32"
	if neox {
		name = "rope_neox_f32"
	}
	return newLaunch(name, grid1(ceilDiv(m*h*d, 256)), 256).ptr(out).ptr(x).ptr(pos).ptr(invFreq).i32(m).i32(h).i32(d).i32(p)
}
