package cuda

import (
	"encoding/binary"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// invFreq returns a device copy of a RoPE's inverse frequencies, made
// once, as a constant.
func (e *encoder) invFreq(inv []float32) (devptr, error) {
	freq := make([]byte, 4*len(inv))
	for j, f := range inv {
		binary.LittleEndian.PutUint32(freq[4*j:], math.Float32bits(f))
	}
	return e.b.constant(freq)
}

// rope encodes RoPEOp.
func (e *encoder) rope(op graph.RoPEOp) error {
	fp, err := e.invFreq(op.InvFreq)
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

// ropeKVWrite encodes RoPEKVWriteOp as one launch: queries rotated into the
// result, keys rotated into the key cache, values into the value cache.
// Its writes are the result and the two caches (graph.WrittenSources).
func (e *encoder) ropeKVWrite(op graph.RoPEKVWriteOp) error {
	fp, err := e.invFreq(op.InvFreq)
	if err != nil {
		return err
	}
	c := e.shape(2)
	e.add(ropeKVWriteLaunch(e.out, e.in[2], e.in[3], e.in[0], e.in[1], e.in[4], fp, e.dtype(2), op.NeoX,
		e.shape(0)[0], op.Heads, op.KVHeads, c[2], c[1], len(op.InvFreq)))
	return nil
}

// ropeKVWriteLaunch: qkv [m,(h+2·kvh)·d], caches [kvh,c,d] of dt, p
// rotated pairs per head; one thread per element of qkv.
func ropeKVWriteLaunch(out, kc, vc, qkv, pos, kvLen, invFreq devptr, dt graph.DType, neox bool, m, h, kvh, d, c, p int) *launch {
	name := "rope_kv_write_adjacent_" + dt.String()
	if neox {
		name = "rope_kv_write_neox_" + dt.String()
	}
	return newLaunch(name, grid1(ceilDiv(m*(h+2*kvh)*d, 256)), 256).ptr(out).ptr(kc).ptr(vc).ptr(qkv).ptr(pos).ptr(kvLen).ptr(invFreq).
		i32(m).i32(h).i32(kvh).i32(d).i32(c).i32(p)
}
