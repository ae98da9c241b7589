// Command affinegen writes the amd64 assembly of package kernels' affine
// (MLX 4- and 8-bit) kernels, affine_amd64.s, and their Go declarations,
// affine_decl_amd64.go.
//
// Run it with `go generate` in internal/backend/cpu/kernels. One TEXT block per
// (ISA, bits, group size, rows of x), each computing, for n consecutive
// weight rows, the dot products of mr rows of x with the row's exactly
// dequantized values (s·q + b as one FMA, exact for f16 scales).
//
// Every row of x gets the same instruction sequence whatever mr is: four
// accumulators per row, chunks assigned to them in a fixed pattern, the
// same final reduction tree. That makes a result independent of how many
// rows share the call.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"math"
	"os"
	"path/filepath"
	"strings"
)

type isa struct {
	name  string
	v     string // "Z" or "Y"
	lanes int
	mrMax int
}

var isas = []isa{
	{name: "avx2", v: "Y", lanes: 8, mrMax: 2},
	{name: "avx512", v: "Z", lanes: 16, mrMax: 4},
}

// prefetch is how far ahead of the codes being read (bytes) the kernels
// prefetch; 0 turns prefetching off.
var prefetch = 8192

type gen struct {
	data bytes.Buffer // DATA blocks, emitted after the header
	s    bytes.Buffer
	g    bytes.Buffer
	lbl  int
}

func (g *gen) a(format string, args ...any) { fmt.Fprintf(&g.s, "\t"+format+"\n", args...) }
func (g *gen) label(l string)               { fmt.Fprintf(&g.s, "%s:\n", l) }
func (g *gen) newLabel(p string) string     { g.lbl++; return fmt.Sprintf("%s%d", p, g.lbl) }

func (is isa) r(i int) string { return fmt.Sprintf("%s%d", is.v, i) }

// Registers.
//
//	DI  x row 0 (prepared layout), BX the walking x pointer
//	R10 ldx in bytes, R14 3·ldx
//	SI  codes, R8 scales, R9 biases (all walk through every row)
//	DX  y, R13 ldy in bytes, AX 3·ldy
//	R11 rows of w left, R12 groups per row, CX group counter
//
// Vector registers: accumulators acc(r, j) = r*4+j (0..15), temporaries
// from 16 (AVX-512: 20..27), scale/table registers at the top.

const argFrame = "$0-72" // x, ldx, codes, scales, biases, n, groups, y, ldy

// floatSig is the Go signature of the float kernels.
const floatSig = "(x *float32, ldx int, codes *byte, scales *float32, biases *float32, n int, groups int, y *float32, ldy int)"

// text starts the assembly of function name with Go signature sig and
// frame, and writes its Go declaration.
func (g *gen) text(name, sig, frame string) {
	fmt.Fprintf(&g.s, "\n// func %s%s\n", name, sig)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, %s\n", name, frame)
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s%s\n\n", name, sig)
}

func (g *gen) prologue(name string) {
	g.text(name, floatSig, argFrame)
	g.a("MOVQ x+0(FP), DI")
	g.a("MOVQ ldx+8(FP), R10")
	g.a("SHLQ $2, R10")
	g.a("LEAQ (R10)(R10*2), R14")
	g.a("MOVQ codes+16(FP), SI")
	g.a("MOVQ scales+24(FP), R8")
	g.a("MOVQ biases+32(FP), R9")
	g.a("MOVQ n+40(FP), R11")
	g.a("MOVQ groups+48(FP), R12")
	g.a("MOVQ y+56(FP), DX")
	g.a("MOVQ ldy+64(FP), R13")
	g.a("SHLQ $2, R13")
	g.a("LEAQ (R13)(R13*2), AX")
}

// xrow is the address of x row r at byte offset off from BX.
func xrow(r, off int) string {
	switch r {
	case 0:
		return fmt.Sprintf("%d(BX)", off)
	case 1:
		return fmt.Sprintf("%d(BX)(R10*1)", off)
	case 2:
		return fmt.Sprintf("%d(BX)(R10*2)", off)
	}
	return fmt.Sprintf("%d(BX)(R14*1)", off)
}

func yrow(r int) string {
	switch r {
	case 0:
		return "(DX)"
	case 1:
		return "(DX)(R13*1)"
	case 2:
		return "(DX)(R13*2)"
	}
	return "(DX)(AX*1)"
}

func acc(r, j int) int { return r*4 + j }

// reduce sums row r's four accumulators into X(acc(r,0)) lane 0 and stores it.
func (g *gen) reduce(is isa, r int) {
	a0, a1, a2, a3 := acc(r, 0), acc(r, 1), acc(r, 2), acc(r, 3)
	g.a("VADDPS %s, %s, %s", is.r(a1), is.r(a0), is.r(a0))
	g.a("VADDPS %s, %s, %s", is.r(a3), is.r(a2), is.r(a2))
	g.a("VADDPS %s, %s, %s", is.r(a2), is.r(a0), is.r(a0))
	if is.v == "Z" {
		g.a("VEXTRACTF64X4 $1, Z%d, Y%d", a0, a1)
		g.a("VADDPS Y%d, Y%d, Y%d", a1, a0, a0)
	}
	g.a("VEXTRACTF128 $1, Y%d, X%d", a0, a1)
	g.a("VADDPS X%d, X%d, X%d", a1, a0, a0)
	g.a("VMOVHLPS X%d, X%d, X%d", a0, a0, a1)
	g.a("VADDPS X%d, X%d, X%d", a1, a0, a0)
	g.a("VMOVSHDUP X%d, X%d", a0, a1)
	g.a("VADDSS X%d, X%d, X%d", a1, a0, a0)
	g.a("VMOVSS X%d, %s", a0, yrow(r))
}

func (g *gen) zeroAccs(is isa, mr int) {
	for r := range mr {
		for j := range 4 {
			a := is.r(acc(r, j))
			g.a("VXORPS %s, %s, %s", a, a, a)
		}
	}
}

// rowLoop wraps body (one weight row) in the loop over n rows.
func (g *gen) rowLoop(is isa, mr int, body func()) {
	done := g.newLabel("done")
	row := g.newLabel("row")
	g.a("TESTQ R11, R11")
	g.a("JEQ %s", done)
	g.label(row)
	g.a("MOVQ DI, BX")
	g.a("MOVQ R12, CX")
	g.zeroAccs(is, mr)
	body()
	for r := range mr {
		g.reduce(is, r)
	}
	g.a("ADDQ $4, DX")
	g.a("DECQ R11")
	g.a("JNE %s", row)
	g.label(done)
	g.a("VZEROUPPER")
	g.a("RET")
}

// fmas multiplies dequantized vector v into accumulator j of every row,
// reading x at byte offset off.
func (g *gen) fmas(is isa, mr, v, j, off int) {
	for r := range mr {
		g.a("VFMADD231PS %s, %s, %s", xrow(r, off), is.r(v), is.r(acc(r, j)))
	}
}

// ---- AVX-512, 4 bits: 32 elements (16 code bytes) per chunk, a 16-entry
// table T = iota·s + b per group, VPERMPS looks codes up in it. x is
// prepared per 32 elements as 16 even then 16 odd elements.

const (
	zIota = 31
	zT0   = 30
	zT1   = 29
	zS    = 28
)

// table512 sets Z(t) = iota·s + b for the group's float32 scale and bias
// at byte offset off.
func (g *gen) table512(t int, off int) {
	g.a("VBROADCASTSS %d(R8), Z%d", off, t)
	g.a("VFMADD213PS.BCST %d(R9), Z%d, Z%d", off, zIota, t)
}

// chunk4x512 processes 32 elements at codes offset coff and x offset xoff
// with table t into accumulators j, j+1.
func (g *gen) pf(coff int) {
	if prefetch > 0 && coff%64 == 0 {
		g.a("PREFETCHT0 %d(SI)", prefetch+coff)
	}
}

func (g *gen) chunk4x512(mr, t, j, coff, xoff, tmp int) {
	is := isas[1]
	g.pf(coff)
	g.a("VPMOVZXBD %d(SI), Z%d", coff, tmp)
	g.a("VPSRLD $4, Z%d, Z%d", tmp, tmp+1)
	g.a("VPERMPS Z%d, Z%d, Z%d", t, tmp, tmp)
	g.a("VPERMPS Z%d, Z%d, Z%d", t, tmp+1, tmp+1)
	g.fmas(is, mr, tmp, j, xoff)
	g.fmas(is, mr, tmp+1, j+1, xoff+64)
}

func (g *gen) affine4avx512(gs, mr int) {
	is := isas[1]
	name := fmt.Sprintf("affine4g%d_%d_avx512", gs, mr)
	g.prologue(name)
	g.a("VMOVUPS affineiota<>(SB), Z%d", zIota)
	g.rowLoop(is, mr, func() {
		if gs == 32 {
			// Two groups (64 elements) per iteration, then an odd group.
			loop, tail, end := g.newLabel("pair"), g.newLabel("tail"), g.newLabel("rowend")
			g.a("CMPQ CX, $2")
			g.a("JLT %s", tail)
			g.label(loop)
			g.table512(zT0, 0)
			g.table512(zT1, 4)
			g.chunk4x512(mr, zT0, 0, 0, 0, 20)
			g.chunk4x512(mr, zT1, 2, 16, 128, 22)
			g.a("ADDQ $32, SI")
			g.a("ADDQ $8, R8")
			g.a("ADDQ $8, R9")
			g.a("ADDQ $256, BX")
			g.a("SUBQ $2, CX")
			g.a("CMPQ CX, $2")
			g.a("JGE %s", loop)
			g.label(tail)
			g.a("TESTQ CX, CX")
			g.a("JEQ %s", end)
			g.table512(zT0, 0)
			g.chunk4x512(mr, zT0, 0, 0, 0, 20)
			g.a("ADDQ $16, SI")
			g.a("ADDQ $4, R8")
			g.a("ADDQ $4, R9")
			g.label(end)
			return
		}
		grp := g.newLabel("group")
		g.label(grp)
		g.table512(zT0, 0)
		for p := range gs / 64 {
			g.chunk4x512(mr, zT0, 0, 32*p, 256*p, 20)
			g.chunk4x512(mr, zT0, 2, 32*p+16, 256*p+128, 22)
		}
		g.a("ADDQ $%d, SI", gs/2)
		g.a("ADDQ $4, R8")
		g.a("ADDQ $4, R9")
		g.a("ADDQ $%d, BX", 4*gs)
		g.a("DECQ CX")
		g.a("JNE %s", grp)
	})
}

// ---- AVX-512, 8 bits: 16 elements (16 code bytes) per chunk, dequantized
// as cvt(q)·s + b (one FMA); x in natural order. Four chunks (64 elements)
// per step, chunk c into accumulator c.

const (
	zB0 = 30
	zS0 = 29
	zB1 = 28
	zS1 = 27
)

func (g *gen) scaleBias512(s, b, off int) {
	g.a("VBROADCASTSS %d(R8), Z%d", off, s)
	g.a("VBROADCASTSS %d(R9), Z%d", off, b)
}

func (g *gen) chunk8x512(mr, s, b, j, coff, xoff, tmp int) {
	is := isas[1]
	g.pf(coff)
	g.a("VPMOVZXBD %d(SI), Z%d", coff, tmp)
	g.a("VCVTDQ2PS Z%d, Z%d", tmp, tmp)
	g.a("VFMADD132PS Z%d, Z%d, Z%d", s, b, tmp)
	g.fmas(is, mr, tmp, j, xoff)
}

func (g *gen) affine8avx512(gs, mr int) {
	is := isas[1]
	name := fmt.Sprintf("affine8g%d_%d_avx512", gs, mr)
	g.prologue(name)
	g.rowLoop(is, mr, func() {
		if gs == 32 {
			loop, tail, end := g.newLabel("pair"), g.newLabel("tail"), g.newLabel("rowend")
			g.a("CMPQ CX, $2")
			g.a("JLT %s", tail)
			g.label(loop)
			g.scaleBias512(zS0, zB0, 0)
			g.scaleBias512(zS1, zB1, 4)
			for c := range 4 {
				s, b := zS0, zB0
				if c >= 2 {
					s, b = zS1, zB1
				}
				g.chunk8x512(mr, s, b, c, 16*c, 64*c, 20+c)
			}
			g.a("ADDQ $64, SI")
			g.a("ADDQ $8, R8")
			g.a("ADDQ $8, R9")
			g.a("ADDQ $256, BX")
			g.a("SUBQ $2, CX")
			g.a("CMPQ CX, $2")
			g.a("JGE %s", loop)
			g.label(tail)
			g.a("TESTQ CX, CX")
			g.a("JEQ %s", end)
			g.scaleBias512(zS0, zB0, 0)
			g.chunk8x512(mr, zS0, zB0, 0, 0, 0, 20)
			g.chunk8x512(mr, zS0, zB0, 1, 16, 64, 21)
			g.a("ADDQ $32, SI")
			g.a("ADDQ $4, R8")
			g.a("ADDQ $4, R9")
			g.label(end)
			return
		}
		grp := g.newLabel("group")
		g.label(grp)
		g.scaleBias512(zS0, zB0, 0)
		for p := range gs / 64 {
			for c := range 4 {
				g.chunk8x512(mr, zS0, zB0, c, 64*p+16*c, 256*p+64*c, 20+c)
			}
		}
		g.a("ADDQ $%d, SI", gs)
		g.a("ADDQ $4, R8")
		g.a("ADDQ $4, R9")
		g.a("ADDQ $%d, BX", 4*gs)
		g.a("DECQ CX")
		g.a("JNE %s", grp)
	})
}

// ---- AVX2: 8 lanes. 4 bits: 16 elements (8 code bytes) per chunk, low
// and high nibbles converted and dequantized with one FMA each; x prepared
// per 16 elements as 8 even then 8 odd. 8 bits: 8 elements per chunk, x in
// natural order. Temporaries Y8-Y11, scale Y12, bias Y13, mask Y15.

const (
	yS    = 12
	yB    = 13
	yMask = 15
)

func (g *gen) scaleBias256(off int) {
	g.a("VBROADCASTSS %d(R8), Y%d", off, yS)
	g.a("VBROADCASTSS %d(R9), Y%d", off, yB)
}

func (g *gen) chunk4x256(mr, j, coff, xoff, tmp int) {
	is := isas[0]
	g.pf(coff)
	g.a("VPMOVZXBD %d(SI), Y%d", coff, tmp)
	g.a("VPSRLD $4, Y%d, Y%d", tmp, tmp+1)
	g.a("VPAND Y%d, Y%d, Y%d", yMask, tmp, tmp)
	g.a("VCVTDQ2PS Y%d, Y%d", tmp, tmp)
	g.a("VCVTDQ2PS Y%d, Y%d", tmp+1, tmp+1)
	g.a("VFMADD132PS Y%d, Y%d, Y%d", yS, yB, tmp)
	g.a("VFMADD132PS Y%d, Y%d, Y%d", yS, yB, tmp+1)
	g.fmas(is, mr, tmp, j, xoff)
	g.fmas(is, mr, tmp+1, j+1, xoff+32)
}

func (g *gen) chunk8x256(mr, j, coff, xoff, tmp int) {
	is := isas[0]
	g.pf(coff)
	g.a("VPMOVZXBD %d(SI), Y%d", coff, tmp)
	g.a("VCVTDQ2PS Y%d, Y%d", tmp, tmp)
	g.a("VFMADD132PS Y%d, Y%d, Y%d", yS, yB, tmp)
	g.fmas(is, mr, tmp, j, xoff)
}

func (g *gen) affineAVX2(bits, gs, mr int) {
	is := isas[0]
	name := fmt.Sprintf("affine%dg%d_%d_avx2", bits, gs, mr)
	g.prologue(name)
	if bits == 4 {
		g.a("VPBROADCASTD affinenibble<>(SB), Y%d", yMask)
	}
	g.rowLoop(is, mr, func() {
		grp := g.newLabel("group")
		g.label(grp)
		g.scaleBias256(0)
		// 32 elements per step.
		for p := range gs / 32 {
			if bits == 4 {
				g.chunk4x256(mr, 0, 16*p, 128*p, 8)
				g.chunk4x256(mr, 2, 16*p+8, 128*p+64, 10)
			} else {
				for c := range 4 {
					g.chunk8x256(mr, c, 32*p+8*c, 128*p+32*c, 8+c)
				}
			}
		}
		g.a("ADDQ $%d, SI", gs*bits/8)
		g.a("ADDQ $4, R8")
		g.a("ADDQ $4, R9")
		g.a("ADDQ $%d, BX", 4*gs)
		g.a("DECQ CX")
		g.a("JNE %s", grp)
	})
}

// ---- AVX-512 VNNI: x quantized per row to int8 in blocks of 32 (one
// float scale per block, as ggml's Q8_0), codes multiplied as unsigned
// bytes by VPDPBUSD. A chunk is 64 code bytes: 128 elements at 4 bits (low
// nibbles times the even elements of x, high nibbles times the odd ones),
// 64 at 8 bits. Each int32 lane holds the sum over 8 (4) elements of one
// group and one x block; it is converted and scaled by s·dx, lane by lane,
// into a float accumulator (chunk A of a step into acc 0, chunk B into
// acc 1). The biases contribute Σ_g b_g·Σx_g, a dot product of the row's
// biases with the x row's group sums, which are sums of the rounded x
// (d·Σq per block), so that the result is exactly the rounded x times the
// weights. A row's result is
// hsum((acc0 + acc1) + bias acc).
//
// Prepared x, per row: for each chunk, its int8 values (4 bits: 64 even
// then 64 odd; 8 bits: 64 in order) then 16 float lane scales; after the
// chunks, the group sums padded with zeros to a multiple of 16.
//
// Scales and biases are rows sstride bytes apart, float32 (converted by
// the caller) or f16 (read directly, "vnnih"); reads past a row's last
// group are masked (K2 for a tail's scales, K3 for the last block of
// biases), so nothing past the end of the arrays is touched.

const vnniArgs = "$0-136"

// vnniSig is the Go signature of the VNNI kernels.
const vnniSig = "(x *byte, ldx int, codes *byte, rowBytes int, scales *byte, biases *byte, sstride int, n int, iters int, tail int, mask uint64, xsOff int, gblocks int, y *float32, ldy int, smask uint64, bmask uint64)"

func (g *gen) vnniPrologue(name string) {
	g.text(name, vnniSig, vnniArgs)
	g.a("MOVQ x+0(FP), DI")
	g.a("MOVQ ldx+8(FP), R10")
	g.a("LEAQ (R10)(R10*2), R14")
	g.a("MOVQ n+56(FP), R11")
	g.a("MOVQ y+104(FP), DX")
	g.a("MOVQ ldy+112(FP), R13")
	g.a("SHLQ $2, R13")
	g.a("LEAQ (R13)(R13*2), AX")
	g.a("MOVQ smask+120(FP), R12")
	g.a("KMOVQ R12, K2")
	g.a("MOVQ bmask+128(FP), R12")
	g.a("KMOVQ R12, K3")
}

const (
	vNib   = 29
	vIdxA  = 30
	vIdxB  = 31
	vW     = 16 // codes (lo), 17 hi
	vScl   = 18
	vFA    = 19
	vFB    = 20
	vTmp   = 25 // + r
	vInt   = 12 // + r
	vBias  = 8  // + r
	vBiasV = 21
)

// vnniChunk processes one chunk: codes at coff(SI) (masked with K1 if
// masked), x at xoff from BX, lane scales F register f, into acc j.
func (g *gen) vnniChunk(bits, mr, j, coff, xoff, f int, masked bool) {
	is := isas[1]
	if masked {
		g.a("VMOVDQU8.Z %d(SI), K1, Z%d", coff, vW)
	} else {
		g.a("VMOVDQU64 %d(SI), Z%d", coff, vW)
	}
	g.pf(coff)
	qb := 64 // bytes of int8 x per chunk
	if bits == 4 {
		g.a("VPSRLW $4, Z%d, Z%d", vW, vW+1)
		g.a("VPANDD Z%d, Z%d, Z%d", vNib, vW, vW)
		g.a("VPANDD Z%d, Z%d, Z%d", vNib, vW+1, vW+1)
		qb = 128
	}
	for r := range mr {
		ir := vInt + r
		g.a("VPXORD Z%d, Z%d, Z%d", ir, ir, ir)
		g.a("VPDPBUSD %s, Z%d, Z%d", xrow(r, xoff), vW, ir)
		if bits == 4 {
			g.a("VPDPBUSD %s, Z%d, Z%d", xrow(r, xoff+64), vW+1, ir)
		}
	}
	for r := range mr {
		ir, tr := vInt+r, vTmp+r
		g.a("VCVTDQ2PS Z%d, Z%d", ir, ir)
		g.a("VMULPS %s, Z%d, Z%d", xrow(r, xoff+qb), f, tr)
		g.a("VFMADD231PS Z%d, Z%d, %s", tr, ir, is.r(acc2(r, j)))
	}
}

// acc2 is row r's float accumulator j (two per row).
func acc2(r, j int) int { return r*2 + j }

// expand loads the 8 scales at (R8) (f16 or float32; with the K2 mask in
// a tail, whose last groups may lie past the end of the scales) and spreads
// them over the lanes of chunk A and chunk B.
func (g *gen) expand(half, masked bool) {
	switch {
	case half && masked:
		g.a("VCVTPH2PS.Z (R8), K2, Y%d", vScl)
	case half:
		g.a("VCVTPH2PS (R8), Y%d", vScl)
	case masked:
		g.a("VMOVUPS.Z (R8), K2, Y%d", vScl)
	default:
		g.a("VMOVUPS (R8), Y%d", vScl)
	}
	g.a("VPERMPS Z%d, Z%d, Z%d", vScl, vIdxA, vFA)
	g.a("VPERMPS Z%d, Z%d, Z%d", vScl, vIdxB, vFB)
}

// biases loads 16 biases at (R9) (f16 or float32), masked with K3 for a
// row's last block.
func (g *gen) biases(half, masked bool) {
	switch {
	case half && masked:
		g.a("VCVTPH2PS.Z (R9), K3, Z%d", vBiasV)
	case half:
		g.a("VCVTPH2PS (R9), Z%d", vBiasV)
	case masked:
		g.a("VMOVUPS.Z (R9), K3, Z%d", vBiasV)
	default:
		g.a("VMOVUPS (R9), Z%d", vBiasV)
	}
}

// affineVNNI emits a VNNI kernel; half kernels read f16 scales and biases
// directly, the others float32 ones converted by the caller.
func (g *gen) affineVNNI(bits, gs, mr int, half bool) {
	is := isas[1]
	suffix, ssize := "vnni", 4
	if half {
		suffix, ssize = "vnnih", 2
	}
	name := fmt.Sprintf("affine%dg%d_%d_%s", bits, gs, mr, suffix)
	e := 128 // elements per chunk
	if bits == 8 {
		e = 64
	}
	stride := 192 // prepared x bytes per chunk
	if bits == 8 {
		stride = 128
	}
	g.vnniPrologue(name)
	idx := func(base int) string {
		return fmt.Sprintf("affineidx%d_%d_%d<>", bits, gs, base)
	}
	g.a("VMOVDQU32 %s(SB), Z%d", idx(0), vIdxA)
	g.a("VMOVDQU32 %s(SB), Z%d", idx(1), vIdxB)
	if bits == 4 {
		g.a("VPBROADCASTB affinenibble<>(SB), Z%d", vNib)
	}
	g.vnniData(bits, gs, e)
	// Scales and biases are prefetched as far ahead as the codes.
	spf := 0
	if prefetch > 0 {
		spf = prefetch * 8 / bits / gs * ssize
	}
	done, row := g.newLabel("done"), g.newLabel("row")
	g.a("TESTQ R11, R11")
	g.a("JEQ %s", done)
	g.label(row)
	g.a("MOVQ DI, BX")
	g.a("MOVQ codes+16(FP), SI")
	g.a("MOVQ scales+32(FP), R8")
	g.a("MOVQ biases+40(FP), R9")
	g.a("MOVQ iters+64(FP), CX")
	for r := range mr {
		for j := range 2 {
			a := is.r(acc2(r, j))
			g.a("VXORPS %s, %s, %s", a, a, a)
		}
		b := is.r(vBias + r)
		g.a("VXORPS %s, %s, %s", b, b, b)
	}
	step, tail := g.newLabel("step"), g.newLabel("tail")
	g.a("TESTQ CX, CX")
	g.a("JEQ %s", tail)
	g.label(step)
	if spf > 0 {
		g.a("PREFETCHT0 %d(R8)", spf)
		g.a("PREFETCHT0 %d(R9)", spf)
	}
	g.expand(half, false)
	g.vnniChunk(bits, mr, 0, 0, 0, vFA, false)
	g.vnniChunk(bits, mr, 1, 64, stride, vFB, false)
	g.a("ADDQ $128, SI")
	g.a("ADDQ $%d, R8", ssize*2*e/gs)
	g.a("ADDQ $%d, BX", 2*stride)
	g.a("DECQ CX")
	g.a("JNE %s", step)
	g.label(tail)
	// tail: 0 none, 1 a masked chunk, 2 a full chunk, 3 a full and a masked one.
	t1, t2, t3, tend := g.newLabel("tail1"), g.newLabel("tail2"), g.newLabel("tail3"), g.newLabel("tailend")
	g.a("MOVQ tail+72(FP), CX")
	g.a("TESTQ CX, CX")
	g.a("JEQ %s", tend)
	g.expand(half, true)
	g.a("MOVQ mask+80(FP), R12")
	g.a("KMOVQ R12, K1")
	g.a("CMPQ CX, $2")
	g.a("JEQ %s", t2)
	g.a("JGT %s", t3)
	g.label(t1)
	g.vnniChunk(bits, mr, 0, 0, 0, vFA, true)
	g.a("JMP %s", tend)
	g.label(t2)
	g.vnniChunk(bits, mr, 0, 0, 0, vFA, false)
	g.a("JMP %s", tend)
	g.label(t3)
	g.vnniChunk(bits, mr, 0, 0, 0, vFA, false)
	g.vnniChunk(bits, mr, 1, 64, stride, vFB, true)
	g.label(tend)
	// Biases times the x group sums: gblocks-1 blocks of 16, then the
	// row's last block under the K3 mask.
	g.a("MOVQ xsOff+88(FP), CX")
	g.a("LEAQ (DI)(CX*1), BX")
	g.a("MOVQ gblocks+96(FP), CX")
	bl, last := g.newLabel("bias"), g.newLabel("biaslast")
	g.a("DECQ CX")
	g.a("JEQ %s", last)
	g.label(bl)
	g.biases(half, false)
	for r := range mr {
		g.a("VFMADD231PS %s, Z%d, Z%d", xrow(r, 0), vBiasV, vBias+r)
	}
	g.a("ADDQ $%d, R9", 16*ssize)
	g.a("ADDQ $64, BX")
	g.a("DECQ CX")
	g.a("JNE %s", bl)
	g.label(last)
	g.biases(half, true)
	for r := range mr {
		g.a("VFMADD231PS %s, Z%d, Z%d", xrow(r, 0), vBiasV, vBias+r)
	}
	for r := range mr {
		a0, a1 := acc2(r, 0), acc2(r, 1)
		g.a("VADDPS Z%d, Z%d, Z%d", a1, a0, a0)
		g.a("VADDPS Z%d, Z%d, Z%d", vBias+r, a0, a0)
		g.hsumStore(a0, a1, r)
	}
	// Next weight row.
	g.a("MOVQ rowBytes+24(FP), CX")
	g.a("ADDQ CX, codes+16(FP)")
	g.a("MOVQ sstride+48(FP), CX")
	g.a("ADDQ CX, scales+32(FP)")
	g.a("ADDQ CX, biases+40(FP)")
	g.a("ADDQ $4, DX")
	g.a("DECQ R11")
	g.a("JNE %s", row)
	g.label(done)
	g.a("VZEROUPPER")
	g.a("RET")
}

// hsumStore adds the 16 lanes of Z(a) (Z(t) is scratch) and stores the sum
// at row r of y.
func (g *gen) hsumStore(a, t, r int) {
	g.a("VEXTRACTF64X4 $1, Z%d, Y%d", a, t)
	g.a("VADDPS Y%d, Y%d, Y%d", t, a, a)
	g.a("VEXTRACTF128 $1, Y%d, X%d", a, t)
	g.a("VADDPS X%d, X%d, X%d", t, a, a)
	g.a("VMOVHLPS X%d, X%d, X%d", a, a, t)
	g.a("VADDPS X%d, X%d, X%d", t, a, a)
	g.a("VMOVSHDUP X%d, X%d", a, t)
	g.a("VADDSS X%d, X%d, X%d", t, a, a)
	g.a("VMOVSS X%d, %s", a, yrow(r))
}

// ---- AVX-512 VNNI over tiles: 4-bit weights repacked (PackAffineTiles)
// so that each zmm holds one code word (8 elements) of 16 consecutive
// weight rows, a row per int32 lane. The same word of every row lines up
// with one 8-element run of x, so x is broadcast (4 int8 evens for the low
// nibbles, 4 odds for the high ones, from the chunk layout of the VNNI
// kernels above) and each lane sums 32 elements of its row, a whole x
// block, before the one conversion to float: about half the instructions
// per multiply-add of the chunk kernels at 5 rows of x, the verification
// shape. Every row of x gets the same instruction sequence whatever mr is,
// and a tile's rows never mix, so results do not depend on the batch or on
// how the tiles are split.
//
// Per tile, the kernel keeps per row of x r: an int32 block sum I(r), a
// float accumulator F(r) += float(I(r))·(s·dx) per x block, and a bias
// accumulator B(r) += b·Σx per group; it stores F(r)+B(r), the 16 rows'
// outputs, at y[r·ldy + 16t ...].
//
// Registers: DI x row 0 (chunk layout), BX walking x for rows 0-3, R12 for
// rows 4-7, R10 ldx, R14 3·ldx; SI the tile codes, R8 scales, R9 biases
// (f16, 16 per group per tile, walking on through every tile); R13 the x
// group sums, 8 floats (one per row) per group; DX y; R11 tiles left; CX
// chunks left.

const tileArgs = "$0-80"

// tileMaxRows is the most rows of x a tile kernel takes (3 registers each).
const tileMaxRows = 8

const tileSig = "(x *byte, ldx int, codes *byte, scales *byte, biases *byte, sums *float32, ntiles int, chunks int, y *float32, ldy int)"

const (
	tF    = 0  // F(r) = Z(r)
	tB    = 8  // B(r) = Z(8+r)
	tI    = 16 // I(r) = Z(16+r)
	tW    = 24 // the code word
	tLo   = 25
	tHi   = 26
	tNib  = 27
	tScl  = 28
	tBias = 29
	tTmp  = 30
)

// txrow is the address of x row r at byte offset off.
func txrow(r, off int) string {
	base := "BX"
	if r >= 4 {
		base, r = "R12", r-4
	}
	switch r {
	case 0:
		return fmt.Sprintf("%d(%s)", off, base)
	case 1:
		return fmt.Sprintf("%d(%s)(R10*1)", off, base)
	case 2:
		return fmt.Sprintf("%d(%s)(R10*2)", off, base)
	}
	return fmt.Sprintf("%d(%s)(R14*1)", off, base)
}

// affineTiles emits the tile kernel for groups of gs and mr rows of x,
// with f16 scales and biases ("vnnit") or float32 ones ("vnnitf": GGUF
// Q4_K's products d·sc). A symmetric kernel ("vnnits", f16 scales) reads no
// biases: each is -2^(bits-1)·s, computed from the scale (GGUF's Q4_0 and
// Q8_0, d·(q-8) and d·q). The product is exact, so it gives the bits the
// biased kernel gives on the same weights with those biases stored, and
// reads 32 fewer bytes per group of a tile: 10% of Q4_0's, 6% of Q8_0's.
func (g *gen) affineTiles(bits, gs, mr int, f32, sym bool) {
	suffix, ssize := "vnnit", 2
	switch {
	case f32:
		suffix, ssize = "vnnitf", 4
	case sym:
		suffix = "vnnits"
	}
	name := fmt.Sprintf("affine%dg%d_%d_%s", bits, gs, mr, suffix)
	// A step covers 128 elements: 4 x blocks of 32; per block, 4 code words
	// of 8 nibbles or 8 words of 4 bytes. x comes in chunks of 128 elements
	// (192 prepared bytes) at 4 bits and of 64 (128 bytes) at 8.
	wordsPerBlock, xStep := 4, 192
	if bits == 8 {
		wordsPerBlock, xStep = 8, 256
	}
	g.text(name, tileSig, tileArgs)
	g.a("MOVQ x+0(FP), DI")
	g.a("MOVQ ldx+8(FP), R10")
	g.a("LEAQ (R10)(R10*2), R14")
	g.a("MOVQ codes+16(FP), SI")
	g.a("MOVQ scales+24(FP), R8")
	g.a("MOVQ biases+32(FP), R9")
	g.a("MOVQ ntiles+48(FP), R11")
	g.a("MOVQ y+64(FP), DX")
	g.a("VPBROADCASTB affinenibble<>(SB), Z%d", tNib)
	done, tile, chunk := g.newLabel("done"), g.newLabel("tile"), g.newLabel("chunk")
	g.a("TESTQ R11, R11")
	g.a("JEQ %s", done)
	g.label(tile)
	g.a("MOVQ DI, BX")
	g.a("LEAQ (DI)(R10*4), R12")
	g.a("MOVQ sums+40(FP), R13")
	g.a("MOVQ chunks+56(FP), CX")
	for r := range mr {
		g.a("VXORPS Z%d, Z%d, Z%d", tF+r, tF+r, tF+r)
		g.a("VXORPS Z%d, Z%d, Z%d", tB+r, tB+r, tB+r)
	}
	g.label(chunk)
	if prefetch > 0 {
		g.a("PREFETCHT0 %d(R8)", prefetch/(gs/2)*ssize/2)
		if !sym {
			g.a("PREFETCHT0 %d(R9)", prefetch/(gs/2)*ssize/2)
		}
	}
	for blk := range 4 {
		if blk*32%gs == 0 {
			// A new group: its scales and biases, and b·Σx.
			load := "VCVTPH2PS"
			if f32 {
				load = "VMOVUPS"
			}
			g.a("%s (R8), Z%d", load, tScl)
			if sym {
				g.a("VMULPS.BCST affinezero%d<>(SB), Z%d, Z%d", bits, tScl, tBias)
			} else {
				g.a("%s (R9), Z%d", load, tBias)
			}
			for r := range mr {
				g.a("VFMADD231PS.BCST %d(R13), Z%d, Z%d", 4*r, tBias, tB+r)
			}
			g.a("ADDQ $%d, R8", 16*ssize)
			if !sym {
				g.a("ADDQ $%d, R9", 16*ssize)
			}
			g.a("ADDQ $32, R13")
		}
		for r := range mr {
			g.a("VPXORD Z%d, Z%d, Z%d", tI+r, tI+r, tI+r)
		}
		for t := range wordsPerBlock {
			w := wordsPerBlock*blk + t
			g.a("VMOVDQU32 %d(SI), Z%d", 64*w, tW)
			if prefetch > 0 {
				g.a("PREFETCHT0 %d(SI)", prefetch+64*w)
			}
			if bits == 8 {
				// Word w: 4 elements, x in order in chunk w/16.
				xoff := 128*(w/16) + 4*(w%16)
				for r := range mr {
					g.a("VPDPBUSD.BCST %s, Z%d, Z%d", txrow(r, xoff), tW, tI+r)
				}
				continue
			}
			// Word w: 8 elements, low nibbles the even ones, high the odd.
			g.a("VPSRLW $4, Z%d, Z%d", tW, tHi)
			g.a("VPANDD Z%d, Z%d, Z%d", tNib, tW, tLo)
			g.a("VPANDD Z%d, Z%d, Z%d", tNib, tHi, tHi)
			for r := range mr {
				g.a("VPDPBUSD.BCST %s, Z%d, Z%d", txrow(r, 4*w), tLo, tI+r)
				g.a("VPDPBUSD.BCST %s, Z%d, Z%d", txrow(r, 64+4*w), tHi, tI+r)
			}
		}
		// The block's x scale: the lane scale of its first word.
		dx := 128 + 16*blk
		if bits == 8 {
			dx = 128*(blk/2) + 64 + 32*(blk%2)
		}
		for r := range mr {
			g.a("VCVTDQ2PS Z%d, Z%d", tI+r, tI+r)
			g.a("VMULPS.BCST %s, Z%d, Z%d", txrow(r, dx), tScl, tTmp)
			g.a("VFMADD231PS Z%d, Z%d, Z%d", tTmp, tI+r, tF+r)
		}
	}
	g.a("ADDQ $%d, SI", 64*4*wordsPerBlock)
	g.a("ADDQ $%d, BX", xStep)
	g.a("ADDQ $%d, R12", xStep)
	g.a("DECQ CX")
	g.a("JNE %s", chunk)
	// Store F+B for each row of x: y + r·ldy, rows 4-7 from R12 = y + 4·ldy.
	g.a("MOVQ ldy+72(FP), CX")
	g.a("SHLQ $2, CX")
	g.a("LEAQ (CX)(CX*2), R13")
	g.a("LEAQ (DX)(CX*4), R12")
	for r := range mr {
		g.a("VADDPS Z%d, Z%d, Z%d", tB+r, tF+r, tF+r)
		base, rr := "DX", r
		if r >= 4 {
			base, rr = "R12", r-4
		}
		addr := map[int]string{0: "(%s)", 1: "(%s)(CX*1)", 2: "(%s)(CX*2)", 3: "(%s)(R13*1)"}[rr]
		g.a("VMOVUPS Z%d, "+addr, tF+r, base)
	}
	g.a("ADDQ $64, DX")
	g.a("DECQ R11")
	g.a("JNE %s", tile)
	g.label(done)
	g.a("VZEROUPPER")
	g.a("RET")
}

var vnniDataDone = map[string]bool{}

// vnniData emits the lane-to-group index tables of chunks A and B.
func (g *gen) vnniData(bits, gs, e int) {
	for base := range 2 {
		name := fmt.Sprintf("affineidx%d_%d_%d<>", bits, gs, base)
		if vnniDataDone[name] {
			continue
		}
		vnniDataDone[name] = true
		var b strings.Builder
		for i := range 16 {
			fmt.Fprintf(&b, "DATA %s+%d(SB)/4, $%d\n", name, 4*i, (base*e+i*e/16)/gs)
		}
		fmt.Fprintf(&b, "GLOBL %s(SB), RODATA|NOPTR, $64\n", name)
		g.data.WriteString(b.String())
	}
}

func main() {
	dir := flag.String("dir", ".", "output directory (internal/backend/cpu/kernels)")
	flag.IntVar(&prefetch, "prefetch", prefetch, "prefetch distance in bytes of codes (0: none)")
	flag.Parse()
	g := &gen{}
	g.data.WriteString("// Code generated by internal/affinegen; DO NOT EDIT.\n\n//go:build amd64 && !noasm\n\n#include \"textflag.h\"\n\n")
	g.data.WriteString("// affineiota holds 0, 1, …, 15 as float32: the codes a 4-bit table maps.\n")
	for i := range 16 {
		fmt.Fprintf(&g.data, "DATA affineiota<>+%d(SB)/4, $%#x\n", 4*i, math.Float32bits(float32(i)))
	}
	g.data.WriteString("GLOBL affineiota<>(SB), RODATA|NOPTR, $64\n\n")
	g.data.WriteString("DATA affinenibble<>+0(SB)/4, $0x0f\nGLOBL affinenibble<>(SB), RODATA|NOPTR, $4\n\n")
	g.data.WriteString("// affinezero<bits> is -2^(bits-1) as float32: a symmetric group's bias over its scale.\n")
	for _, bits := range []int{4, 8} {
		fmt.Fprintf(&g.data, "DATA affinezero%d<>+0(SB)/4, $%#x\nGLOBL affinezero%d<>(SB), RODATA|NOPTR, $4\n", bits, math.Float32bits(-float32(int(1)<<(bits-1))), bits)
	}
	g.data.WriteString("\n")
	g.data.WriteString("// affineidx<bits>_<group>_<chunk> map the int32 lanes of chunk A (0) or B (1)\n// of a VNNI step to the group, among the 8 scales loaded for the step, of their elements.\n")
	g.g.WriteString("// Code generated by internal/affinegen; DO NOT EDIT.\n\n//go:build amd64 && !noasm\n\npackage kernels\n\n")
	for _, gs := range []int{32, 64, 128} {
		for mr := 1; mr <= isas[1].mrMax; mr++ {
			g.affine4avx512(gs, mr)
			g.affine8avx512(gs, mr)
		}
		for mr := 1; mr <= isas[0].mrMax; mr++ {
			g.affineAVX2(4, gs, mr)
			g.affineAVX2(8, gs, mr)
		}
		for mr := 1; mr <= 4; mr++ {
			for _, half := range []bool{false, true} {
				g.affineVNNI(4, gs, mr, half)
				g.affineVNNI(8, gs, mr, half)
			}
		}
	}
	for _, bits := range []int{4, 8} {
		for _, f32 := range []bool{false, true} {
			for _, gs := range []int{32, 64, 128} {
				for mr := 1; mr <= tileMaxRows; mr++ {
					g.affineTiles(bits, gs, mr, f32, false)
				}
			}
		}
	}
	// Symmetric kernels for GGUF's blocks, which are groups of 32 with f16 scales.
	for _, bits := range []int{4, 8} {
		for mr := 1; mr <= tileMaxRows; mr++ {
			g.affineTiles(bits, 32, mr, false, true)
		}
	}
	// Tables of the functions by bits, group size and rows.
	var tbl strings.Builder
	for _, is := range isas {
		fmt.Fprintf(&tbl, "var affineFuncs_%s = map[[3]int]affineFunc{\n", is.name)
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				for mr := 1; mr <= is.mrMax; mr++ {
					fmt.Fprintf(&tbl, "\t{%d, %d, %d}: affine%dg%d_%d_%s,\n", bits, gs, mr, bits, gs, mr, is.name)
				}
			}
		}
		tbl.WriteString("}\n\n")
	}
	for _, suffix := range []string{"vnni", "vnnih"} {
		fmt.Fprintf(&tbl, "var affineFuncs_%s = map[[3]int]affineVNNIFunc{\n", suffix)
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				for mr := 1; mr <= 4; mr++ {
					fmt.Fprintf(&tbl, "\t{%d, %d, %d}: affine%dg%d_%d_%s,\n", bits, gs, mr, bits, gs, mr, suffix)
				}
			}
		}
		tbl.WriteString("}\n\n")
	}
	for _, suffix := range []string{"vnnit", "vnnitf"} {
		fmt.Fprintf(&tbl, "var affineFuncs_%s = map[[3]int]affineTileFunc{\n", suffix)
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				for mr := 1; mr <= tileMaxRows; mr++ {
					fmt.Fprintf(&tbl, "\t{%d, %d, %d}: affine%dg%d_%d_%s,\n", bits, gs, mr, bits, gs, mr, suffix)
				}
			}
		}
		tbl.WriteString("}\n\n")
	}
	tbl.WriteString("var affineFuncs_vnnits = map[[3]int]affineTileFunc{\n")
	for _, bits := range []int{4, 8} {
		for mr := 1; mr <= tileMaxRows; mr++ {
			fmt.Fprintf(&tbl, "\t{%d, 32, %d}: affine%dg32_%d_vnnits,\n", bits, mr, bits, mr)
		}
	}
	tbl.WriteString("}\n\n")
	g.g.WriteString(tbl.String())
	src, err := format.Source(g.g.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	out := append(g.data.Bytes(), g.s.Bytes()...)
	if err := os.WriteFile(filepath.Join(*dir, "affine_amd64.s"), out, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "affine_decl_amd64.go"), src, 0o644); err != nil {
		log.Fatal(err)
	}
}
