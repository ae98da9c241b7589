package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter/quant"
	"github.com/seed9b8f47b1/redrafter/runtime/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/runtime/graph"
)

// Affine-quantized weights (graph.Dequantize, QMatMul, QEmbed). The
// reference backend dequantizes each weight row with package quant's
// reference and takes the same index-order dot product as refMatMul, so
// QMatMul(x, w) on it equals MatMul(x, Dequantize(w)) bit for bit; the fast
// backend uses kernels.MatMulAffine.

func u32(o graph.Operand) []uint32 {
	b := bytesOf(o)
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// affineRows describes the weight operands w, scales, biases of a
// quantized op for the kernels.
func affineRows(w, scales, biases graph.Operand, bits, groupSize int) (kernels.AffineRows, error) {
	var st kernels.ScaleType
	switch scales.DType {
	case graph.F16:
		st = kernels.ScalesF16
	case graph.BF16:
		st = kernels.ScalesBF16
	case graph.F32:
		st = kernels.ScalesF32
	default:
		return kernels.AffineRows{}, fmt.Errorf("scales of dtype %v", scales.DType)
	}
	return kernels.AffineRows{Bits: bits, GroupSize: groupSize, K: w.Shape[1] * 32 / bits, Codes: u32(w),
		Scales: bytesOf(scales), Biases: bytesOf(biases), ScaleType: st}, nil
}

// dequantRow sets dst to row j of the quantized matrix (the reference
// dequantization); sc and bi are scratch for the row's scales and biases.
func dequantRow(dst []float32, w *kernels.AffineRows, j int, sc, bi []float32) {
	k := w.K
	groups := k / w.GroupSize
	words := k * w.Bits / 32
	for g := range groups {
		sc[g] = scaleAt(w, j*groups+g, false)
		bi[g] = scaleAt(w, j*groups+g, true)
	}
	quant.DequantizeAffine(dst, w.Codes[j*words:(j+1)*words], sc, bi, w.Bits, w.GroupSize)
}

func scaleAt(w *kernels.AffineRows, i int, bias bool) float32 {
	b := w.Scales
	if bias {
		b = w.Biases
	}
	switch w.ScaleType {
	case kernels.ScalesF16:
		return quant.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	case kernels.ScalesBF16:
		return quant.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// dequantize runs graph.Dequantize: every row, with the reference.
func (b *Backend) dequantize(out graph.Operand, in []graph.Operand, op graph.Dequantize) error {
	w, err := affineRows(in[0], in[1], in[2], op.Bits, op.GroupSize)
	if err != nil {
		return err
	}
	y, k := f32(out), w.K
	groups := k / w.GroupSize
	b.pool.parallel(out.Shape[0], 1, max(1, 1<<14/k), func(_, lo, hi int) {
		sc, bi := make([]float32, groups), make([]float32, groups)
		for j := lo; j < hi; j++ {
			dequantRow(y[j*k:(j+1)*k], &w, j, sc, bi)
		}
	})
	return nil
}

// qembed runs graph.QEmbed: the reference dequantization of the rows asked for.
func (b *Backend) qembed(out graph.Operand, in []graph.Operand, op graph.QEmbed) error {
	w, err := affineRows(in[0], in[1], in[2], op.Bits, op.GroupSize)
	if err != nil {
		return err
	}
	y, ids, k := f32(out), i32(in[3]), w.K
	n := in[0].Shape[0]
	groups := k / w.GroupSize
	sc, bi := make([]float32, groups), make([]float32, groups)
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("token id %d outside the table of %d rows", id, n)
		}
		dequantRow(y[i*k:(i+1)*k], &w, int(id), sc, bi)
	}
	return nil
}

// qmatmul runs graph.QMatMul: out[M,N] = x[M,K]·Dequantize(w)ᵀ, splitting
// the rows of w across workers.
func (b *Backend) qmatmul(out graph.Operand, in []graph.Operand, op graph.QMatMul) error {
	w, err := affineRows(in[1], in[2], in[3], op.Bits, op.GroupSize)
	if err != nil {
		return err
	}
	x, y := f32(in[0]), f32(out)
	m, k, n := in[0].Shape[0], w.K, in[1].Shape[0]
	if b.reference {
		groups := k / w.GroupSize
		row, sc, bi := make([]float32, k), make([]float32, groups), make([]float32, groups)
		for j := range n {
			dequantRow(row, &w, j, sc, bi)
			for i := range m {
				var s float32
				for t, xv := range x[i*k : (i+1)*k] {
					s += xv * row[t]
				}
				y[i*n+j] = s
			}
		}
		return nil
	}
	minRows := max(1, 1<<16/(k*max(m, 1)))
	if t := b.tilesOf(in[1], in[2], in[3], w); t != nil {
		px := kernels.PrepareAffine(x, m, k, op.Bits, op.GroupSize)
		b.pool.parallel(n, tileRows, minRows, func(_, lo, hi int) {
			kernels.MatMulAffineTilesX(y[lo:], n, px, t.Rows(lo, hi))
		})
		px.Release()
		return nil
	}
	const rowAlign = 8
	px := kernels.PrepareAffine(x, m, k, op.Bits, op.GroupSize) // once, shared by the workers
	b.pool.parallel(n, rowAlign, minRows, func(_, lo, hi int) {
		kernels.MatMulAffineX(y[lo:], n, px, w.Rows(lo, hi))
	})
	px.Release()
	return nil
}

// Repacked 4-bit weights. On machines whose affine kernels include the tile
// kernel (kernels.PackAffineTiles), a weight's codes, scales and biases are
// repacked once, at its first product, and kept with its codes buffer;
// every product with that weight then uses the tile kernel, whatever the
// batch, so decoding and verification round alike. It costs a copy of the
// weight's codes: for weights mapped from a file the original pages are
// read once and can be dropped by the OS; weights converted at load (GGUF
// blocks) are held twice. REDRAFTER_CPU_TILES=off turns repacking off.

// tileRows is the rows of a tile: the worker split of a tiled product.
const tileRows = 16

// tilesOff is REDRAFTER_CPU_TILES=off, read once.
var tilesOff = os.Getenv("REDRAFTER_CPU_TILES") == "off"

// packedTiles is a repacked weight and what it was packed from.
type packedTiles struct {
	scales, biases *buffer
	sOff, bOff     int
	groupSize      int
	t              *kernels.AffineTiles // nil: the weight does not suit the tile kernel
}

// tilesOf returns the tiles of the weight whose codes, scales and biases
// are w, s and bi, packing them on first use, or nil when the weight is not
// a model weight (WrapHost) or does not suit the tile kernel.
func (b *Backend) tilesOf(w, s, bi graph.Operand, rows kernels.AffineRows) *kernels.AffineTiles {
	cb, sb, bb := w.Buf.(*buffer), s.Buf.(*buffer), bi.Buf.(*buffer)
	if tilesOff || !cb.weights || !sb.weights || !bb.weights || w.Off != 0 {
		return nil
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if p := cb.tiles; p != nil && p.scales == sb && p.biases == bb && p.sOff == s.Off && p.bOff == bi.Off && p.groupSize == rows.GroupSize {
		return p.t
	}
	cb.tiles = &packedTiles{scales: sb, biases: bb, sOff: s.Off, bOff: bi.Off, groupSize: rows.GroupSize,
		t: kernels.PackAffineTiles(rows)}
	return cb.tiles.t
}

// dropTiles forgets a repacked copy of x (its bytes are being written).
func (x *buffer) dropTiles() {
	x.mu.Lock()
	x.tiles = nil
	x.mu.Unlock()
}
