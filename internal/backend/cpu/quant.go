package cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Affine-quantized weights (graph.DequantizeOp, QMatMulOp, QEmbedOp). The
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
// dequantization), read from t when the weight was repacked in place (t is
// nil otherwise); sc, bi and codes are scratch for the row.
func dequantRow(dst []float32, w *kernels.AffineRows, t *kernels.AffineTiles, j int, sc, bi []float32, codes []uint32) {
	k := w.K
	groups := k / w.GroupSize
	words := k * w.Bits / 32
	if t != nil {
		t.Row(j, codes, sc, bi)
		quant.DequantizeAffine(dst, codes, sc, bi, w.Bits, w.GroupSize)
		return
	}
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

// dequantize runs graph.DequantizeOp: every row, with the reference.
func (b *Backend) dequantize(out graph.Operand, in []graph.Operand, op graph.DequantizeOp) error {
	w, err := affineRows(in[0], in[1], in[2], op.Bits, op.GroupSize)
	if err != nil {
		return err
	}
	y, k := f32(out), w.K
	groups := k / w.GroupSize
	t := repackedTiles(in[0])
	b.pool.parallel(out.Shape[0], 1, max(1, 1<<14/k), func(lo, hi int) {
		sc, bi, codes := make([]float32, groups), make([]float32, groups), make([]uint32, k*w.Bits/32)
		for j := lo; j < hi; j++ {
			dequantRow(y[j*k:(j+1)*k], &w, t, j, sc, bi, codes)
		}
	})
	return nil
}

// qembed runs graph.QEmbedOp: the reference dequantization of the rows asked
// for.
func (b *Backend) qembed(out graph.Operand, in []graph.Operand, op graph.QEmbedOp) error {
	w, err := affineRows(in[0], in[1], in[2], op.Bits, op.GroupSize)
	if err != nil {
		return err
	}
	y, ids, k := f32(out), i32(in[3]), w.K
	n := in[0].Shape[0]
	groups := k / w.GroupSize
	t := repackedTiles(in[0])
	sc, bi, codes := make([]float32, groups), make([]float32, groups), make([]uint32, k*w.Bits/32)
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("token id %d outside the table of %d rows", id, n)
		}
		dequantRow(y[i*k:(i+1)*k], &w, t, int(id), sc, bi, codes)
	}
	return nil
}

// preparedX is the x of a Run's last quantized product, prepared for the
// kernels (kernels.AffineX), kept for the next step if that multiplies the
// same x: q, k and v share one, gate and up another. Any other step drops
// it (it could write x), as does a product whose output overlaps x.
type preparedX struct {
	x        graph.Operand
	bits, gs int
	px       *kernels.AffineX
}

func (p *preparedX) release() {
	if p.px != nil {
		p.px.Release()
		p.px = nil
	}
}

// prepare returns x (operand o, m rows of k) prepared for bits and groups
// of gs: p's if it holds this x, else a new one, its rows split across the
// workers when there are several (a TinyLlama-shaped verification pass
// prepares 88 of them, 5 or more rows each, before the workers can start on
// the products).
func (b *Backend) prepare(p *preparedX, o graph.Operand, x []float32, m, k, bits, gs int) *kernels.AffineX {
	if p.px != nil && p.x.Buf == o.Buf && p.x.Off == o.Off && p.x.Bytes() == o.Bytes() && p.bits == bits && p.gs == gs {
		return p.px
	}
	p.release()
	px := kernels.NewAffineX(x, m, k, bits, gs)
	if m > 1 {
		b.pool.parallel(m, 1, 1, px.PrepareRows)
	} else {
		px.PrepareRows(0, m)
	}
	p.x, p.bits, p.gs, p.px = o, bits, gs, px
	return px
}

// overlaps reports whether a and b share bytes of one buffer.
func overlaps(a, b graph.Operand) bool {
	return a.Buf == b.Buf && a.Off < b.Off+b.Bytes() && b.Off < a.Off+a.Bytes()
}

// qmatmul runs graph.QMatMulOp: out[M,N] = x[M,K]·Dequantize(w)ᵀ, splitting
// the rows of w across workers. x comes from prep when it holds it.
func (b *Backend) qmatmul(out graph.Operand, in []graph.Operand, op graph.QMatMulOp, prep *preparedX) error {
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
			dequantRow(row, &w, nil, j, sc, bi, nil)
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
	t, err := b.tilesOf(in[1], in[2], in[3], w)
	if err != nil {
		return err
	}
	px := b.prepare(prep, in[0], x, m, k, op.Bits, op.GroupSize) // once, shared by the workers
	if t != nil {
		b.pool.parallel(n, tileRows, minRows, func(lo, hi int) {
			kernels.MatMulAffineTilesX(y[lo:], n, px, t.Rows(lo, hi))
		})
	} else {
		const rowAlign = 8
		b.pool.parallel(n, rowAlign, minRows, func(lo, hi int) {
			kernels.MatMulAffineX(y[lo:], n, px, w.Rows(lo, hi))
		})
	}
	if overlaps(out, in[0]) {
		prep.release()
	}
	return nil
}

// Repacked 4- and 8-bit weights. On machines whose affine kernels include the tile
// kernel (kernels.TilesFit), a weight's codes, scales and biases are
// repacked once, at its first product, and every product with that weight
// then uses the tile kernel, whatever the batch, so decoding and
// verification round alike. Weights handed over with AdoptHost (GGUF
// blocks converted at load) are repacked in place when their rows are whole
// tiles; others, mapped from a file, get a copy (the file's pages are read
// once and the OS can drop them). REDRAFTER_CPU_TILES=off turns repacking
// off.

// tileRows is the rows of a tile: the worker split of a tiled product.
const tileRows = 16

// tilesOff is REDRAFTER_CPU_TILES=off, read once (envvar.CPUTiles).
var tilesOff = envvar.CPUTiles.Off()

var errRepacked = errors.New("cpu: the bytes of a weight repacked in place cannot be read or written")

// packedTiles is a repacked weight and what it was packed from.
type packedTiles struct {
	scales, biases *buffer
	sOff, bOff     int
	groupSize      int
	t              *kernels.AffineTiles // nil: the weight does not suit the tile kernel
}

// tilesOf returns the tiles of the weight whose codes, scales and biases
// are w, s and bi, packing them on first use, or nil when the weight is not
// a model weight (WrapHost, AdoptHost) or does not suit the tile kernel.
func (b *Backend) tilesOf(w, s, bi graph.Operand, rows kernels.AffineRows) (*kernels.AffineTiles, error) {
	cb, sb, bb := w.Buf.(*buffer), s.Buf.(*buffer), bi.Buf.(*buffer)
	if tilesOff || !cb.weights || !sb.weights || !bb.weights || w.Off != 0 {
		return nil, nil
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if p := cb.tiles; p != nil && p.scales == sb && p.biases == bb && p.sOff == s.Off && p.bOff == bi.Off && p.groupSize == rows.GroupSize {
		return p.t, nil
	}
	if cb.repacked {
		// Repacked in place with other scales, biases or groups.
		return nil, errRepacked
	}
	p := &packedTiles{scales: sb, biases: bb, sOff: s.Off, bOff: bi.Off, groupSize: rows.GroupSize}
	whole := w.Bytes() == len(cb.b) && s.Off == 0 && s.Bytes() == len(sb.b) && bi.Off == 0 && bi.Bytes() == len(bb.b)
	if cb.owned && sb.owned && bb.owned && whole && sb != cb && bb != cb && sb != bb {
		sb.mu.Lock()
		bb.mu.Lock()
		if !sb.repacked && !bb.repacked {
			if p.t = kernels.PackAffineTilesInPlace(rows); p.t != nil {
				cb.repacked, sb.repacked, bb.repacked = true, true, true
			}
		}
		bb.mu.Unlock()
		sb.mu.Unlock()
	}
	switch {
	case p.t != nil:
		b.repackedInPlace.Add(1)
	default:
		if p.t = kernels.PackAffineTiles(rows); p.t != nil {
			b.repackedCopies.Add(1)
		}
	}
	if p.t != nil && p.t.Symmetric {
		b.repackedSymmetric.Add(1)
	}
	cb.tiles = p
	return p.t, nil
}

// ComputesSymmetricBiases reports whether the fast backend's products with
// a quantized model weight whose biases are all -2^(bits-1) times their
// scales compute those biases rather than read them (kernels' Symmetric
// tiles): K elements per row, groups of groupSize, scales of dtype scales.
func (b *Backend) ComputesSymmetricBiases(bits, groupSize, k int, scales graph.DType) bool {
	return !b.reference && !tilesOff && scales == graph.F16 && kernels.SymmetricTilesFit(bits, groupSize, k, kernels.ScalesF16)
}

// Repacked counts the quantized weights repacked for the tile kernel so far:
// in place (handed over with AdoptHost) and as copies.
func (b *Backend) Repacked() (inPlace, copies int) {
	return int(b.repackedInPlace.Load()), int(b.repackedCopies.Load())
}

// RepackedSymmetric counts the weights among Repacked's whose tiles are
// symmetric: their biases are computed from the scales, not read.
func (b *Backend) RepackedSymmetric() int { return int(b.repackedSymmetric.Load()) }

// repackedTiles returns the tiles of a codes buffer repacked in place, or
// nil when the buffer still holds MLX's layout.
func repackedTiles(o graph.Operand) *kernels.AffineTiles {
	x := o.Buf.(*buffer)
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.repacked || x.tiles == nil {
		return nil
	}
	return x.tiles.t
}

func (x *buffer) isRepacked() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.repacked
}

// dropTiles forgets a repacked copy of x, whose bytes are being written;
// bytes repacked in place cannot be written.
func (x *buffer) dropTiles() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.repacked {
		return errRepacked
	}
	x.tiles = nil
	return nil
}
