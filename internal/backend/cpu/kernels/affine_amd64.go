//go:build amd64 && !noasm

package kernels

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// affineFunc is a generated float kernel (internal/affinegen): for each of
// n consecutive weight rows (codes, scales and biases walk on from row to
// row), the dot products of mr rows of prepared x (ldx floats apart) with
// the row's dequantized values, stored at y[r*ldy], y advancing by one per
// weight row. Scales and biases are float32.
type affineFunc = func(x *float32, ldx int, codes *byte, scales *float32, biases *float32, n int, groups int, y *float32, ldy int)

// affineVNNIFunc is a generated VNNI kernel: int8 x (prepared by
// prepareVNNIRows) times unsigned codes; see internal/affinegen.
type affineVNNIFunc = func(x *byte, ldx int, codes *byte, rowBytes int, scales *byte, biases *byte, sstride int,
	n int, iters int, tail int, mask uint64, xsOff int, gblocks int, y *float32, ldy int, smask uint64, bmask uint64)

// vnniPrep quantizes blocks of 32 floats into the VNNI layout (chunk
// layout of internal/affinegen) and stores each block's sum: of the
// rounded values, d·Σq, which the biases multiply.
//
//go:noescape
func vnniPrep(x *float32, blocks int, out *byte, bits int, sums *float32)

var (
	affineAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	affineAVX512 = affineAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL
	affineVNNI   = affineAVX512 && cpu.X86.HasAVX512VNNI
)

// affineKernels are the kernels of one ISA level.
type affineKernels struct {
	name  string
	funcs map[[3]int]affineFunc     // float kernels by bits, group size, rows
	vnni  map[[3]int]affineVNNIFunc // float32 scales
	vnnih map[[3]int]affineVNNIFunc // f16 scales, read directly
	mrMax int
	// chunk is the width over which 4-bit x is laid out as evens then odds
	// for the float kernels.
	chunk int
}

var affineSets = func() []affineKernels {
	var s []affineKernels
	if affineAVX2 {
		s = append(s, affineKernels{name: "avx2", funcs: affineFuncs_avx2, mrMax: 2, chunk: 16})
	}
	if affineAVX512 {
		s = append(s, affineKernels{name: "avx512", funcs: affineFuncs_avx512, mrMax: 4, chunk: 32})
	}
	if affineVNNI {
		s = append(s, affineKernels{name: "avx512vnni", vnni: affineFuncs_vnni, vnnih: affineFuncs_vnnih, mrMax: 4})
	}
	return s
}()

var affineCur = func() *affineKernels {
	if len(affineSets) == 0 {
		return nil
	}
	return &affineSets[len(affineSets)-1]
}()

// affinePrep is x prepared for one kernel family: float32s laid out for
// the float kernels (nil when x serves as is), or the VNNI bytes.
type affinePrep struct {
	xf *[]float32
	xb *[]byte
	l  vnniLayout
}

var (
	floatPool sync.Pool
	bytePool  sync.Pool
)

// floats returns a pooled buffer of n float32s.
func floats(n int) *[]float32 {
	p, _ := floatPool.Get().(*[]float32)
	if p == nil {
		p = new([]float32)
	}
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// alloc takes the memory of x's prepared form: for the VNNI kernels, filled
// row by row by prepareRows; for the float kernels, prepared at once (it is
// a reordering, and fast).
func (ks *affineKernels) alloc(x []float32, m, k, bits, gs int) affinePrep {
	if ks.vnni != nil {
		l := newVNNILayout(k, bits, gs)
		return affinePrep{xb: vnniBuffer(m, l), l: l}
	}
	if bits != 4 {
		return affinePrep{}
	}
	// 4-bit float kernels: each chunk of x as its even elements, then its
	// odd ones.
	p := floats(len(x))
	xp := *p
	c, h := ks.chunk, ks.chunk/2
	for base := 0; base+c <= len(x); base += c {
		src, dst := x[base:base+c:base+c], xp[base:base+c:base+c]
		for i := range h {
			dst[i], dst[h+i] = src[2*i], src[2*i+1]
		}
	}
	return affinePrep{xf: p}
}

// prepareRows quantizes rows [lo, hi) of x for the VNNI kernels.
func (ks *affineKernels) prepareRows(p *affinePrep, x []float32, k, bits, gs, lo, hi int) {
	if p.xb != nil {
		prepareVNNIRows(*p.xb, x, k, bits, gs, p.l, lo, hi)
	}
}

func (ks *affineKernels) release(p affinePrep) {
	if p.xf != nil {
		floatPool.Put(p.xf)
	}
	if p.xb != nil {
		bytePool.Put(p.xb)
	}
}

// toF32 converts stored scales (or biases) to float32.
func toF32(dst []float32, src []byte, t ScaleType) {
	switch t {
	case ScalesF16, ScalesBF16:
		h := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(src))), len(src)/2)
		if t == ScalesF16 {
			ConvertF16ToF32(dst, h)
		} else {
			ConvertBF16ToF32(dst, h)
		}
	default:
		for i := range dst {
			dst[i] = t.at(src, i)
		}
	}
}

// affineRowBlock is how many bytes of codes one pass over the rows of x
// covers, so a block of weight rows stays in L2 while every row block of x
// goes past it.
const affineRowBlock = 96 << 10

// run computes MatMulAffineX with these kernels. Weight rows go in blocks
// whose codes fit in L2; each block's scales and biases are converted to
// float32 first (exactly), and every row block of x (up to mrMax rows) is
// run past it.
func (ks *affineKernels) run(y []float32, ldy int, p *AffineX, w *AffineRows, n int) {
	if ks.vnni != nil {
		ks.runVNNI(y, ldy, p, w, n)
		return
	}
	m, k, gs, bits := p.m, w.K, w.GroupSize, w.Bits
	xp := p.x
	if p.prep.xf != nil {
		xp = *p.prep.xf
	}
	groups := k / gs
	rowBytes := k * bits / 8
	sb := groups * w.ScaleType.Size() // scale bytes per row
	codes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.Codes))), len(w.Codes)*4)
	rb := min(n, max(1, affineRowBlock/rowBytes))
	sp := floats(2 * rb * groups)
	var fn [5]affineFunc
	for mr := 1; mr <= ks.mrMax; mr++ {
		fn[mr] = ks.funcs[[3]int{bits, gs, mr}]
	}
	for j0 := 0; j0 < n; j0 += rb {
		nb := min(rb, n-j0)
		ss, bs := (*sp)[:nb*groups], (*sp)[rb*groups:rb*groups+nb*groups]
		toF32(ss, w.Scales[j0*sb:(j0+nb)*sb], w.ScaleType)
		toF32(bs, w.Biases[j0*sb:(j0+nb)*sb], w.ScaleType)
		c := &codes[j0*rowBytes]
		for i0 := 0; i0 < m; {
			mr := min(ks.mrMax, m-i0)
			fn[mr](&xp[i0*k], k, c, &ss[0], &bs[0], nb, groups, &y[i0*ldy+j0], ldy)
			i0 += mr
		}
	}
	floatPool.Put(sp)
}

// VNNI: x is quantized per row to int8 in blocks of 32 with a float32
// scale each (d = max|x|/127, q = round(x/d)), as ggml's Q8_0 does, and
// laid out per 64-code-byte chunk (see internal/affinegen): int8 values,
// then each int32 lane's x scale; after the chunks, the x sum of each
// weight group, padded to 16.

const vnniBlock = 32

// vnniLayout is the prepared-x layout for K elements.
type vnniLayout struct {
	e, stride    int // elements and prepared bytes per chunk
	chunks, gpad int
	xsOff, ldx   int // offset of the group sums; bytes per row
}

func newVNNILayout(k, bits, gs int) vnniLayout {
	l := vnniLayout{e: 128, stride: 192}
	if bits == 8 {
		l.e, l.stride = 64, 128
	}
	l.chunks = (k + l.e - 1) / l.e
	l.gpad = (k/gs + 15) &^ 15
	l.xsOff = l.chunks * l.stride
	l.ldx = l.xsOff + 4*l.gpad
	return l
}

// vnniBuffer returns a pooled buffer for m rows of prepared x.
func vnniBuffer(m int, l vnniLayout) *[]byte {
	p, _ := bytePool.Get().(*[]byte)
	if p == nil {
		p = new([]byte)
	}
	if cap(*p) < m*l.ldx {
		*p = make([]byte, m*l.ldx)
	}
	*p = (*p)[:m*l.ldx]
	return p
}

// prepareVNNIRows quantizes rows [lo, hi) of x into buf.
func prepareVNNIRows(buf []byte, x []float32, k, bits, gs int, l vnniLayout, lo, hi int) {
	blocks := k / vnniBlock
	sp := floats(blocks)
	sums := *sp
	per := gs / vnniBlock
	for i := lo; i < hi; i++ {
		row := buf[i*l.ldx : (i+1)*l.ldx]
		clear(row)
		vnniPrep(&x[i*k], blocks, &row[0], bits, &sums[0])
		xs := unsafe.Slice((*float32)(unsafe.Pointer(&row[l.xsOff])), l.gpad)
		for g := range k / gs {
			s := sums[g*per]
			for _, v := range sums[g*per+1 : (g+1)*per] {
				s += v
			}
			xs[g] = s
		}
	}
	floatPool.Put(sp)
}

func (ks *affineKernels) runVNNI(y []float32, ldy int, p *AffineX, w *AffineRows, n int) {
	m, k, gs, bits := p.m, w.K, w.GroupSize, w.Bits
	l := p.prep.l
	xb := *p.prep.xb
	groups := k / gs
	iters := k / (2 * l.e)
	rem := k - iters*2*l.e
	var tail, maskBytes int
	switch {
	case rem == 0:
	case rem < l.e:
		tail, maskBytes = 1, rem*bits/8
	case rem == l.e:
		tail = 2
	default:
		tail, maskBytes = 3, (rem-l.e)*bits/8
	}
	mask := uint64(1)<<maskBytes - 1
	// The tail's scales and the last block of biases are read under masks.
	smask := uint64(1)<<min(8, groups-iters*2*l.e/gs) - 1
	bmask := uint64(1)<<(groups-16*(l.gpad/16-1)) - 1
	rowBytes := k * bits / 8
	codes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.Codes))), len(w.Codes)*4)
	call := func(fn *[5]affineVNNIFunc, j0, nb int, ss, bs *byte, sstride int) {
		for i0 := 0; i0 < m; {
			mr := min(ks.mrMax, m-i0)
			fn[mr](&xb[i0*l.ldx], l.ldx, &codes[j0*rowBytes], rowBytes, ss, bs, sstride,
				nb, iters, tail, mask, l.xsOff, l.gpad/16, &y[i0*ldy+j0], ldy, smask, bmask)
			i0 += mr
		}
	}
	// Weight rows go in blocks whose codes stay in L2 while every block of
	// rows of x is run past them.
	rb := min(n, max(1, affineRowBlock/rowBytes))
	var fn [5]affineVNNIFunc
	if w.ScaleType == ScalesF16 {
		// f16 scales and biases straight from the weights.
		for mr := 1; mr <= ks.mrMax; mr++ {
			fn[mr] = ks.vnnih[[3]int{bits, gs, mr}]
		}
		if m <= ks.mrMax {
			rb = n // one pass over the weights
		}
		for j0 := 0; j0 < n; j0 += rb {
			nb := min(rb, n-j0)
			call(&fn, j0, nb, &w.Scales[j0*2*groups], &w.Biases[j0*2*groups], 2*groups)
		}
		return
	}
	for mr := 1; mr <= ks.mrMax; mr++ {
		fn[mr] = ks.vnni[[3]int{bits, gs, mr}]
	}
	// Other scale types: converted to float32 per block of rows.
	sb := groups * w.ScaleType.Size()
	sp := floats(2 * rb * groups)
	ss, bs := (*sp)[:rb*groups], (*sp)[rb*groups:]
	for j0 := 0; j0 < n; j0 += rb {
		nb := min(rb, n-j0)
		toF32(ss[:nb*groups], w.Scales[j0*sb:(j0+nb)*sb], w.ScaleType)
		toF32(bs[:nb*groups], w.Biases[j0*sb:(j0+nb)*sb], w.ScaleType)
		call(&fn, j0, nb, (*byte)(unsafe.Pointer(&ss[0])), (*byte)(unsafe.Pointer(&bs[0])), 4*groups)
	}
	floatPool.Put(sp)
}

// affineKernelSets lists the assembly levels this CPU has, for tests.
func affineKernelSets() []affineKernels { return affineSets }

// call runs MatMulAffine with this level's kernels (for tests).
func (ks affineKernels) call(y []float32, ldy int, x []float32, m int, w AffineRows) {
	n := w.check("MatMulAffine")
	if m > 0 && n > 0 {
		p := &AffineX{x: x, m: m, k: w.K, bits: w.Bits, gs: w.GroupSize, impl: &ks}
		p.prep = ks.alloc(x, m, w.K, w.Bits, w.GroupSize)
		ks.prepareRows(&p.prep, x, w.K, w.Bits, w.GroupSize, 0, m)
		ks.run(y, ldy, p, &w, n)
		ks.release(p.prep)
	}
}

// affineTileFunc is a generated tile kernel (internal/affinegen): ntiles
// tiles of 16 weight rows, each over chunks chunks of 128 elements, for up
// to 8 rows of x prepared in the VNNI chunk layout; sums holds each x row's
// group sums, 8 floats (one per row) per group.
type affineTileFunc = func(x *byte, ldx int, codes *byte, scales *byte, biases *byte, sums *float32,
	ntiles int, chunks int, y *float32, ldy int)

// tileMaxRows is the most rows of x one tile kernel call takes.
const tileMaxRows = 8

// affineTiles reports whether PackAffineTiles packs: on AVX-512 VNNI
// machines, whose affine kernels are then the VNNI ones.
var affineTiles = affineVNNI

// hasSymmetricTiles reports whether a symmetric tile kernel exists for
// these weights: f16 scales in groups of 32 (GGUF's blocks).
func hasSymmetricTiles(bits, gs int, st ScaleType) bool {
	_, ok := affineFuncs_vnnits[[3]int{bits, gs, 1}]
	return affineTiles && st == ScalesF16 && ok
}

// runTiles computes MatMulAffineTilesX. Tiles go in blocks whose codes
// stay in L2 while every block of up to 8 rows of x is run past them (one
// block, one pass over the weights, for the verification batches).
func runTiles(y []float32, ldy int, p *AffineX, t *AffineTiles) {
	if p.prep.xb == nil || p.prep.l.stride != map[int]int{4: 192, 8: 128}[t.Bits] {
		panic("kernels: MatMulAffineTilesX: x is not prepared for the VNNI kernels")
	}
	l, xb := p.prep.l, *p.prep.xb
	m, n, gs := p.m, t.N, t.GroupSize
	words, groups, chunks := t.words(), t.K/gs, t.K/tileK
	full, partial := n/tileRows, n%tileRows
	ntiles := (n + tileRows - 1) / tileRows
	tileBytes := words * tileRows * 4
	tb := ntiles
	if m > tileMaxRows {
		tb = max(1, affineRowBlock/tileBytes)
	}
	sp := floats(groups*tileMaxRows + tileMaxRows*tileRows)
	sums, scratch := (*sp)[:groups*tileMaxRows], (*sp)[groups*tileMaxRows:]
	codes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.codes))), len(t.codes)*4)
	scales, biases := t.scales, t.biases
	sb := groups * tileRows * t.ScaleType.Size() // scale bytes per tile
	funcs := affineFuncs_vnnit
	switch {
	case t.Symmetric:
		funcs = affineFuncs_vnnits
	case t.ScaleType == ScalesF32:
		funcs = affineFuncs_vnnitf
	}
	// A symmetric kernel reads no biases (the pointer stays nil).
	biasAt := func(tile int) *byte {
		if t.Symmetric {
			return nil
		}
		return &biases[tile*sb]
	}
	for t0 := 0; t0 < ntiles; t0 += tb {
		t1 := min(ntiles, t0+tb)
		for i0 := 0; i0 < m; {
			mr := min(tileMaxRows, m-i0)
			for r := range mr {
				row := xb[(i0+r)*l.ldx:]
				xs := unsafe.Slice((*float32)(unsafe.Pointer(&row[l.xsOff])), groups)
				for g, v := range xs {
					sums[g*tileMaxRows+r] = v
				}
			}
			fn := funcs[[3]int{t.Bits, gs, mr}]
			x := &xb[i0*l.ldx]
			if nf := min(t1, full) - t0; nf > 0 {
				fn(x, l.ldx, &codes[t0*tileBytes], &scales[t0*sb], biasAt(t0), &sums[0], nf, chunks, &y[i0*ldy+tileRows*t0], ldy)
			}
			if partial > 0 && t1 > full {
				// The last tile's padding rows have no place in y.
				fn(x, l.ldx, &codes[full*tileBytes], &scales[full*sb], biasAt(full), &sums[0], 1, chunks, &scratch[0], tileRows)
				for r := range mr {
					o := (i0+r)*ldy + tileRows*full
					copy(y[o:o+partial], scratch[r*tileRows:r*tileRows+partial])
				}
			}
			i0 += mr
		}
	}
	floatPool.Put(sp)
}
