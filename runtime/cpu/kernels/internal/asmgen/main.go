// Command asmgen writes the amd64 assembly of package kernels
// (kernels_amd64.s) and its Go declarations (asm_amd64.go).
//
// Run it with `go generate` in runtime/cpu/kernels. The generated code is
// plain Plan 9 assembly: one TEXT block per (ISA, kernel, tile shape), so
// every shape is a straight-line loop with its registers fixed at generation
// time.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"strings"
)

// isa describes one instruction-set level.
type isa struct {
	name   string // suffix of the generated functions
	v      string // vector register prefix: "Z" or "Y"
	lanes  int    // float32 lanes per vector
	nregs  int    // vector registers available
	masked bool   // AVX-512 opmask tails; otherwise the Go caller does the tail
	mrMax  int    // largest tile height (rows of x)
	nrMax  int    // largest tile width (rows of w)
}

var isas = []isa{
	{name: "avx2", v: "Y", lanes: 8, nregs: 16, masked: false, mrMax: 3, nrMax: 4},
	{name: "avx512", v: "Z", lanes: 16, nregs: 32, masked: true, mrMax: 6, nrMax: 4},
}

// dtype is a weight element type.
type dtype struct {
	name   string // F32, F16, BF16
	goType string
	size   int // bytes per element
}

var dtypes = []dtype{{"F32", "float32", 4}, {"F16", "uint16", 2}, {"BF16", "uint16", 2}}

type gen struct {
	s   bytes.Buffer // assembly
	g   bytes.Buffer // Go declarations
	lbl int
}

func (g *gen) a(format string, args ...any) { fmt.Fprintf(&g.s, "\t"+format+"\n", args...) }
func (g *gen) label(l string)               { fmt.Fprintf(&g.s, "%s:\n", l) }
func (g *gen) newLabel(p string) string     { g.lbl++; return fmt.Sprintf("%s%d", p, g.lbl) }

func (is isa) reg(i int) string { return fmt.Sprintf("%s%d", is.v, i) }

// xreg is the 128-bit view of register i.
func xreg(i int) string { return fmt.Sprintf("X%d", i) }

// yreg is the 256-bit view of register i.
func yreg(i int) string { return fmt.Sprintf("Y%d", i) }

func log2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}

// ku is how many accumulator sets a tile uses. It is 1 for every shape, on
// purpose: then y[i,j] is computed by the same sequence of operations
// (lane-wise FMAs over k in order, then the same reduction tree) whatever
// tile computes it, so results do not depend on m or on how the caller
// splits w. Even the 1×4 tile keeps four FMA chains in flight, far more
// than a memory-bound matrix-vector product needs.
func ku(is isa, mr, nr int) int { return 1 }

// Tile kernel: for i < mr, j < nr,
//
//	y[i*ldy+j] = Σ_{kk<k} x[i*ldx+kk] * float32(w[j*ldw+kk])
//
// On AVX2 k must be a multiple of 8.
// pfInstr is the prefetch the tiles issue for the next weight block ("" for
// none). PREFETCHT0, PREFETCHT1 and PREFETCHNTA measured alike on the
// AMD EPYC (Zen 5) VM; all beat none by 1.2-1.5× on cold F16 products.
const pfInstr = "PREFETCHT0"

var gpRegs = []string{"SI", "DI", "BX", "DX", "R8", "R9", "R10", "R11", "R12", "R13"}

func (g *gen) loadW(is isa, dt dtype, base string, off int, dst string, masked bool) {
	z, k := "", ""
	if masked {
		z, k = ".Z", "K1, "
	}
	switch dt.name {
	case "F32":
		g.a("VMOVUPS%s %d(%s), %s%s", z, off, base, k, dst)
	case "F16":
		g.a("VCVTPH2PS%s %d(%s), %s%s", z, off, base, k, dst)
	case "BF16":
		g.a("VPMOVZXWD%s %d(%s), %s%s", z, off, base, k, dst)
		g.a("VPSLLD $16, %s, %s", dst, dst)
	}
}

// tile writes the kernel for an mr×nr block. Registers: x row i is
// addressed as (xr[i])(AX*4) with AX running from -k up to 0; weight row j
// by the pointer wr[j], advanced every iteration; pf holds nr*ldw bytes, so
// (wr[j])(pf*1) is the same position in the next tile's row j, which the
// main loop prefetches (the caller walks w in blocks of nr rows).
func (g *gen) tile(is isa, dt dtype, mr, nr int) string {
	name := fmt.Sprintf("tile%s_%s_%dx%d", dt.name, is.name, mr, nr)
	u := ku(is, mr, nr)
	steps := max(u, 64/(is.lanes*dt.size)) // chunks per main-loop iteration: ≥ one cache line of each w row
	nacc := mr * nr
	if nacc*u+mr+1 > is.nregs || nacc > is.nregs-4 || mr+nr > len(gpRegs) {
		log.Fatalf("%s: does not fit the register file", name)
	}
	xr := gpRegs[:mr]
	wr := gpRegs[mr : mr+nr]
	pf := "R15" // only the 6×4 AVX-512 tiles, which touch no globals
	if mr+nr < len(gpRegs) {
		pf = gpRegs[mr+nr]
	}
	acc := func(set, i, j int) string { return is.reg(set*nacc + i*nr + j) }
	xv := func(i int) string { return is.reg(is.nregs - 1 - i) }
	wv := func(j int) string {
		r := is.nregs - 1 - mr
		if is.nregs-2-mr >= nacc*u && j%2 == 1 {
			r--
		}
		return is.reg(r)
	}
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(x *float32, ldx int, w *%s, ldw int, k int, y *float32, ldy int)\n\n", name, dt.goType)
	fmt.Fprintf(&g.s, "// func %s(x *float32, ldx int, w *%s, ldw int, k int, y *float32, ldy int)\n", name, dt.goType)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-56\n", name)
	g.a("MOVQ k+32(FP), CX")
	g.a("MOVQ x+0(FP), %s", xr[0])
	g.a("MOVQ ldx+8(FP), R14")
	g.a("SHLQ $2, R14")
	g.a("LEAQ (%s)(CX*4), %s", xr[0], xr[0])
	for i := 1; i < mr; i++ {
		g.a("LEAQ (%s)(R14*1), %s", xr[i-1], xr[i])
	}
	g.a("MOVQ w+16(FP), %s", wr[0])
	g.a("MOVQ ldw+24(FP), R14")
	g.a("SHLQ $%d, R14", log2(dt.size))
	for j := 1; j < nr; j++ {
		g.a("LEAQ (%s)(R14*1), %s", wr[j-1], wr[j])
	}
	if pfInstr != "" {
		g.a("IMUL3Q $%d, R14, %s", nr, pf)
	}
	g.a("MOVQ CX, AX")
	g.a("NEGQ AX")
	for a := 0; a < nacc*u; a++ {
		if is.masked {
			g.a("VPXORD %s, %s, %s", is.reg(a), is.reg(a), is.reg(a))
		} else {
			g.a("VXORPS %s, %s, %s", is.reg(a), is.reg(a), is.reg(a))
		}
	}
	body := func(set, c int, masked bool) {
		z, k := "", ""
		if masked {
			z, k = ".Z", "K1, "
		}
		for i := 0; i < mr; i++ {
			g.a("VMOVUPS%s %d(%s)(AX*4), %s%s", z, c*is.lanes*4, xr[i], k, xv(i))
		}
		for j := 0; j < nr; j++ {
			g.loadW(is, dt, wr[j], c*is.lanes*dt.size, wv(j), masked)
			for i := 0; i < mr; i++ {
				g.a("VFMADD231PS %s, %s, %s", wv(j), xv(i), acc(set, i, j))
			}
		}
	}
	advance := func(chunks int) {
		g.a("ADDQ $%d, AX", chunks*is.lanes)
		for j := 0; j < nr; j++ {
			g.a("ADDQ $%d, %s", chunks*is.lanes*dt.size, wr[j])
		}
	}
	loopU, loop1, tail, reduce := g.newLabel("loop_"), g.newLabel("loop1_"), g.newLabel("tail_"), g.newLabel("reduce_")
	g.label(loopU)
	g.a("CMPQ AX, $-%d", steps*is.lanes)
	g.a("JGT %s", loop1)
	if pfInstr != "" {
		for j := 0; j < nr; j++ {
			for off := 0; off < steps*is.lanes*dt.size; off += 64 {
				g.a("%s %d(%s)(%s*1)", pfInstr, off, wr[j], pf)
			}
		}
	}
	for c := 0; c < steps; c++ {
		body(c%u, c, false)
	}
	advance(steps)
	g.a("JMP %s", loopU)
	g.label(loop1)
	if steps > 1 {
		g.a("CMPQ AX, $-%d", is.lanes)
		g.a("JGT %s", tail)
		body(0, 0, false)
		advance(1)
		g.a("JMP %s", loop1)
	}
	g.label(tail)
	if is.masked {
		g.a("TESTQ AX, AX")
		g.a("JEQ %s", reduce)
		g.a("MOVQ AX, CX")
		g.a("NEGQ CX")
		g.a("MOVL $1, R14")
		g.a("SHLL CX, R14")
		g.a("DECL R14")
		g.a("KMOVW R14, K1")
		body(0, 0, true)
	}
	g.label(reduce)
	for s := 1; s < u; s++ {
		for a := 0; a < nacc; a++ {
			g.a("VADDPS %s, %s, %s", is.reg(s*nacc+a), is.reg(a), is.reg(a))
		}
	}
	// Reduction: for each row i, four accumulators (missing ones read as
	// zero) become one 128-bit [s0 s1 s2 s3] via two rounds of
	// shuffle-and-add within 128-bit lanes, then the lanes are summed.
	t0, t1, t2, tz := is.nregs-1, is.nregs-2, is.nregs-3, is.nregs-4
	if nr < 4 {
		if is.masked {
			g.a("VPXORD %s, %s, %s", is.reg(tz), is.reg(tz), is.reg(tz))
		} else {
			g.a("VXORPS %s, %s, %s", is.reg(tz), is.reg(tz), is.reg(tz))
		}
	}
	g.a("MOVQ y+40(FP), DI")
	g.a("MOVQ ldy+48(FP), R14")
	g.a("SHLQ $2, R14")
	if nr < 4 {
		if is.masked {
			g.a("MOVL $%d, BX", 1<<nr-1)
			g.a("KMOVW BX, K2")
		} else {
			g.a("VMOVDQU tailmask<>+%d(SB), %s", 4*(4-nr), xreg(tz-1))
		}
	}
	for i := 0; i < mr; i++ {
		r := func(j int) string {
			if j < nr {
				return acc(0, i, j)
			}
			return is.reg(tz)
		}
		g.a("VSHUFPS $0x88, %s, %s, %s", r(1), r(0), is.reg(t0))
		g.a("VSHUFPS $0xDD, %s, %s, %s", r(1), r(0), is.reg(t1))
		g.a("VADDPS %s, %s, %s", is.reg(t1), is.reg(t0), is.reg(t0))
		if nr > 2 {
			g.a("VSHUFPS $0x88, %s, %s, %s", r(3), r(2), is.reg(t1))
			g.a("VSHUFPS $0xDD, %s, %s, %s", r(3), r(2), is.reg(t2))
			g.a("VADDPS %s, %s, %s", is.reg(t2), is.reg(t1), is.reg(t1))
		} else {
			t1 = tz
		}
		g.a("VSHUFPS $0x88, %s, %s, %s", is.reg(t1), is.reg(t0), is.reg(t2))
		g.a("VSHUFPS $0xDD, %s, %s, %s", is.reg(t1), is.reg(t0), is.reg(t0))
		t1 = is.nregs - 2
		g.a("VADDPS %s, %s, %s", is.reg(t2), is.reg(t0), is.reg(t0))
		if is.masked {
			g.a("VEXTRACTF64X4 $1, %s, %s", is.reg(t0), yreg(t1))
			g.a("VADDPS %s, %s, %s", yreg(t1), yreg(t0), yreg(t0))
			g.a("VEXTRACTF32X4 $1, %s, %s", yreg(t0), xreg(t1))
		} else {
			g.a("VEXTRACTF128 $1, %s, %s", yreg(t0), xreg(t1))
		}
		g.a("VADDPS %s, %s, %s", xreg(t1), xreg(t0), xreg(t0))
		switch {
		case nr == 4:
			g.a("VMOVUPS %s, (DI)", xreg(t0))
		case is.masked:
			g.a("VMOVUPS %s, K2, (DI)", xreg(t0))
		default:
			g.a("VMASKMOVPS %s, %s, (DI)", xreg(t0), xreg(tz-1))
		}
		if i+1 < mr {
			g.a("ADDQ R14, DI")
		}
	}
	g.a("VZEROUPPER")
	g.a("RET")
	g.s.WriteString("\n")
	return name
}

// stream writes an element-wise kernel over n elements: an unrolled loop of
// four vectors, a one-vector loop and (AVX-512) a masked tail. ptrs are the
// argument names of the pointers with their element sizes; body(r, off,
// masked) emits one vector's work using vector register r at element offset
// off.
func (g *gen) stream(is isa, name, goArgs string, frame int, ptrs []string, sizes []int, setup func(), body func(r, off int, masked bool)) {
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s)\n\n", name, goArgs)
	fmt.Fprintf(&g.s, "// func %s(%s)\n", name, goArgs)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", name, frame)
	g.a("MOVQ n+%d(FP), CX", 8*len(ptrs))
	regs := []string{"DI", "SI"}
	for i, p := range ptrs {
		g.a("MOVQ %s+%d(FP), %s", p, 8*i, regs[i])
		g.a("LEAQ (%s)(CX*%d), %s", regs[i], sizes[i], regs[i])
	}
	setup()
	g.a("MOVQ CX, AX")
	g.a("NEGQ AX")
	loop4, loop1, tail, done := g.newLabel("loop4_"), g.newLabel("loop1_"), g.newLabel("tail_"), g.newLabel("done_")
	g.label(loop4)
	g.a("CMPQ AX, $-%d", 4*is.lanes)
	g.a("JGT %s", loop1)
	for r := 0; r < 4; r++ {
		body(r, r*is.lanes, false)
	}
	g.a("ADDQ $%d, AX", 4*is.lanes)
	g.a("JMP %s", loop4)
	g.label(loop1)
	g.a("CMPQ AX, $-%d", is.lanes)
	g.a("JGT %s", tail)
	body(0, 0, false)
	g.a("ADDQ $%d, AX", is.lanes)
	g.a("JMP %s", loop1)
	g.label(tail)
	if is.masked {
		g.a("TESTQ AX, AX")
		g.a("JEQ %s", done)
		g.a("MOVQ AX, CX")
		g.a("NEGQ CX")
		g.a("MOVL $1, R14")
		g.a("SHLL CX, R14")
		g.a("DECL R14")
		g.a("KMOVW R14, K1")
		body(0, 0, true)
	}
	g.label(done)
	g.a("VZEROUPPER")
	g.a("RET")
	g.s.WriteString("\n")
}

// dot writes dot<D>_<isa>(x *float32, w *T, n int) float32: four
// accumulators over 4 vectors per iteration, then one vector per iteration,
// then (AVX-512) a masked tail; AVX2 handles n rounded down to 8.
func (g *gen) dot(is isa, dt dtype) {
	name := fmt.Sprintf("dot%s_%s", dt.name, is.name)
	args := fmt.Sprintf("x *float32, w *%s, n int", dt.goType)
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s) float32\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s) float32\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-28\n", name)
	g.a("MOVQ x+0(FP), SI")
	g.a("MOVQ w+8(FP), DI")
	g.a("MOVQ n+16(FP), CX")
	g.a("LEAQ (SI)(CX*4), SI")
	g.a("LEAQ (DI)(CX*%d), DI", dt.size)
	g.a("MOVQ CX, AX")
	g.a("NEGQ AX")
	for a := 0; a < 4; a++ {
		if is.masked {
			g.a("VPXORD %s, %s, %s", is.reg(a), is.reg(a), is.reg(a))
		} else {
			g.a("VXORPS %s, %s, %s", is.reg(a), is.reg(a), is.reg(a))
		}
	}
	load := func(c int, acc, t string, masked bool) {
		z, k := "", ""
		if masked {
			z, k = ".Z", "K1, "
		}
		off := c * is.lanes
		switch dt.name {
		case "F32":
			g.a("VMOVUPS%s %d(DI)(AX*4), %s%s", z, off*4, k, t)
		case "F16":
			g.a("VCVTPH2PS%s %d(DI)(AX*2), %s%s", z, off*2, k, t)
		case "BF16":
			g.a("VPMOVZXWD%s %d(DI)(AX*2), %s%s", z, off*2, k, t)
			g.a("VPSLLD $16, %s, %s", t, t)
		}
		if masked {
			g.a("VMOVUPS.Z %d(SI)(AX*4), K1, %s", off*4, is.reg(8))
			g.a("VFMADD231PS %s, %s, %s", is.reg(8), t, acc)
		} else {
			g.a("VFMADD231PS %d(SI)(AX*4), %s, %s", off*4, t, acc)
		}
	}
	loop4, loop1, tail, reduce := g.newLabel("loop4_"), g.newLabel("loop1_"), g.newLabel("tail_"), g.newLabel("reduce_")
	g.label(loop4)
	g.a("CMPQ AX, $-%d", 4*is.lanes)
	g.a("JGT %s", loop1)
	for c := 0; c < 4; c++ {
		load(c, is.reg(c), is.reg(4+c), false)
	}
	g.a("ADDQ $%d, AX", 4*is.lanes)
	g.a("JMP %s", loop4)
	g.label(loop1)
	g.a("CMPQ AX, $-%d", is.lanes)
	g.a("JGT %s", tail)
	load(0, is.reg(0), is.reg(4), false)
	g.a("ADDQ $%d, AX", is.lanes)
	g.a("JMP %s", loop1)
	g.label(tail)
	if is.masked {
		g.a("TESTQ AX, AX")
		g.a("JEQ %s", reduce)
		g.a("MOVQ AX, CX")
		g.a("NEGQ CX")
		g.a("MOVL $1, R14")
		g.a("SHLL CX, R14")
		g.a("DECL R14")
		g.a("KMOVW R14, K1")
		load(0, is.reg(1), is.reg(4), true)
	}
	g.label(reduce)
	g.a("VADDPS %s, %s, %s", is.reg(1), is.reg(0), is.reg(0))
	g.a("VADDPS %s, %s, %s", is.reg(3), is.reg(2), is.reg(2))
	g.a("VADDPS %s, %s, %s", is.reg(2), is.reg(0), is.reg(0))
	if is.masked {
		g.a("VEXTRACTF64X4 $1, Z0, Y1")
		g.a("VADDPS Y1, Y0, Y0")
	}
	g.a("VEXTRACTF128 $1, Y0, X1")
	g.a("VADDPS X1, X0, X0")
	g.a("VMOVHLPS X0, X0, X1")
	g.a("VADDPS X1, X0, X0")
	g.a("VMOVSHDUP X0, X1")
	g.a("VADDSS X1, X0, X0")
	g.a("VZEROUPPER")
	g.a("MOVSS X0, ret+24(FP)")
	g.a("RET")
	g.s.WriteString("\n")
}

func (g *gen) streams(is isa) {
	mz := func(m bool) (string, string) {
		if m {
			return ".Z", "K1, "
		}
		return "", ""
	}
	mk := func(m bool) string {
		if m {
			return "K1, "
		}
		return ""
	}
	a := is.reg(is.nregs - 1)
	// axpy: y += a*x
	g.stream(is, "axpy_"+is.name, "y *float32, x *float32, n int, a float32", 28,
		[]string{"y", "x"}, []int{4, 4},
		func() { g.a("VBROADCASTSS a+24(FP), %s", a) },
		func(r, off int, m bool) {
			z, k := mz(m)
			v, t := is.reg(r), is.reg(r+4)
			g.a("VMOVUPS%s %d(SI)(AX*4), %s%s", z, off*4, k, v)
			g.a("VMOVUPS%s %d(DI)(AX*4), %s%s", z, off*4, k, t)
			g.a("VFMADD231PS %s, %s, %s", v, a, t)
			g.a("VMOVUPS %s, %s%d(DI)(AX*4)", t, mk(m), off*4)
		})
	// scale: x *= a
	g.stream(is, "scale_"+is.name, "x *float32, n int, a float32", 20,
		[]string{"x"}, []int{4},
		func() { g.a("VBROADCASTSS a+16(FP), %s", a) },
		func(r, off int, m bool) {
			z, k := mz(m)
			v := is.reg(r)
			g.a("VMOVUPS%s %d(DI)(AX*4), %s%s", z, off*4, k, v)
			g.a("VMULPS %s, %s, %s", a, v, v)
			g.a("VMOVUPS %s, %s%d(DI)(AX*4)", v, mk(m), off*4)
		})
	// f16 -> f32
	g.stream(is, "cvtF16F32_"+is.name, "dst *float32, src *uint16, n int", 24,
		[]string{"dst", "src"}, []int{4, 2}, func() {},
		func(r, off int, m bool) {
			z, k := mz(m)
			v := is.reg(r)
			g.a("VCVTPH2PS%s %d(SI)(AX*2), %s%s", z, off*2, k, v)
			g.a("VMOVUPS %s, %s%d(DI)(AX*4)", v, mk(m), off*4)
		})
	// bf16 -> f32
	g.stream(is, "cvtBF16F32_"+is.name, "dst *float32, src *uint16, n int", 24,
		[]string{"dst", "src"}, []int{4, 2}, func() {},
		func(r, off int, m bool) {
			z, k := mz(m)
			v := is.reg(r)
			g.a("VPMOVZXWD%s %d(SI)(AX*2), %s%s", z, off*2, k, v)
			g.a("VPSLLD $16, %s, %s", v, v)
			g.a("VMOVUPS %s, %s%d(DI)(AX*4)", v, mk(m), off*4)
		})
	// f32 -> f16, round to nearest even
	g.stream(is, "cvtF32F16_"+is.name, "dst *uint16, src *float32, n int", 24,
		[]string{"dst", "src"}, []int{2, 4}, func() {},
		func(r, off int, m bool) {
			z, k := mz(m)
			v := is.reg(r)
			g.a("VMOVUPS%s %d(SI)(AX*4), %s%s", z, off*4, k, v)
			g.a("VCVTPS2PH $0, %s, %s%d(DI)(AX*2)", v, mk(m), off*2)
		})
}

// axpyRows writes axpyRows_<isa>(y, p, v *float32, ldv, rows, n int):
// y[j] += p[r]·v[r·ldv+j] for r = 0..rows-1 in order, j < n, one FMA per
// term, as axpy rounds it. Columns go in chunks of four vectors held in
// registers across all rows, then single vectors, then (AVX-512) a masked
// tail; AVX2 handles n rounded down to a multiple of 8.
func (g *gen) axpyRows(is isa) {
	name := "axpyRows_" + is.name
	args := "y *float32, p *float32, v *float32, ldv int, rows int, n int"
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s)\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s)\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-48\n", name)
	g.a("MOVQ y+0(FP), DI")
	g.a("MOVQ p+8(FP), SI")
	g.a("MOVQ v+16(FP), DX")
	g.a("MOVQ ldv+24(FP), R8")
	g.a("SHLQ $2, R8")
	g.a("MOVQ rows+32(FP), R9")
	g.a("MOVQ n+40(FP), CX")
	bcast := is.reg(8)
	// chunk emits one column chunk of nv vectors (the last masked if asked).
	chunk := func(nv int, masked bool) {
		z, k := "", ""
		if masked {
			z, k = ".Z", "K1, "
		}
		for c := 0; c < nv; c++ {
			g.a("VMOVUPS%s %d(DI), %s%s", z, c*is.lanes*4, k, is.reg(c))
		}
		g.a("MOVQ DX, R10")
		g.a("MOVQ SI, R11")
		g.a("MOVQ R9, R12")
		loop, done := g.newLabel("rows_"), g.newLabel("rowsdone_")
		g.label(loop)
		g.a("TESTQ R12, R12")
		g.a("JEQ %s", done)
		g.a("VBROADCASTSS (R11), %s", bcast)
		for c := 0; c < nv; c++ {
			if masked {
				g.a("VMOVUPS.Z %d(R10), K1, %s", c*is.lanes*4, is.reg(9))
				g.a("VFMADD231PS %s, %s, %s", is.reg(9), bcast, is.reg(c))
			} else {
				g.a("VFMADD231PS %d(R10), %s, %s", c*is.lanes*4, bcast, is.reg(c))
			}
		}
		g.a("ADDQ R8, R10")
		g.a("ADDQ $4, R11")
		g.a("DECQ R12")
		g.a("JMP %s", loop)
		g.label(done)
		for c := 0; c < nv; c++ {
			g.a("VMOVUPS %s, %s%d(DI)", is.reg(c), k, c*is.lanes*4)
		}
		g.a("ADDQ $%d, DI", nv*is.lanes*4)
		g.a("ADDQ $%d, DX", nv*is.lanes*4)
	}
	loop4, loop1, tail, ret := g.newLabel("cols4_"), g.newLabel("cols1_"), g.newLabel("colstail_"), g.newLabel("ret_")
	g.label(loop4)
	g.a("CMPQ CX, $%d", 4*is.lanes)
	g.a("JLT %s", loop1)
	chunk(4, false)
	g.a("SUBQ $%d, CX", 4*is.lanes)
	g.a("JMP %s", loop4)
	g.label(loop1)
	g.a("CMPQ CX, $%d", is.lanes)
	g.a("JLT %s", tail)
	chunk(1, false)
	g.a("SUBQ $%d, CX", is.lanes)
	g.a("JMP %s", loop1)
	g.label(tail)
	if is.masked {
		g.a("TESTQ CX, CX")
		g.a("JEQ %s", ret)
		g.a("MOVL $1, R14")
		g.a("SHLL CX, R14")
		g.a("DECL R14")
		g.a("KMOVW R14, K1")
		chunk(1, true)
	}
	g.label(ret)
	g.a("VZEROUPPER")
	g.a("RET")
	g.s.WriteString("\n")
}

func main() {
	out := flag.String("dir", ".", "directory of package kernels")
	flag.Parse()
	var g gen
	g.s.WriteString("// Code generated by internal/asmgen; DO NOT EDIT.\n\n//go:build amd64 && !noasm\n\n#include \"textflag.h\"\n\n")
	g.s.WriteString("// tailmask+4*(4-nr) holds nr all-ones dwords followed by zeros (AVX2 partial stores).\n")
	for i := 0; i < 8; i++ {
		v := "0xffffffff"
		if i >= 4 {
			v = "0"
		}
		fmt.Fprintf(&g.s, "DATA tailmask<>+%d(SB)/4, $%s\n", 4*i, v)
	}
	g.s.WriteString("GLOBL tailmask<>(SB), RODATA|NOPTR, $32\n\n")
	g.g.WriteString("// Code generated by internal/asmgen; DO NOT EDIT.\n\n//go:build amd64 && !noasm\n\npackage kernels\n\n")
	var tables strings.Builder
	for _, is := range isas {
		for _, dt := range dtypes {
			fmt.Fprintf(&tables, "// tiles%s_%s[mr][nr] computes an mr×nr tile (mr ≤ %d, nr ≤ %d).\n", dt.name, is.name, is.mrMax, is.nrMax)
			fmt.Fprintf(&tables, "var tiles%s_%s = [%d][%d]func(x *float32, ldx int, w *%s, ldw int, k int, y *float32, ldy int){\n", dt.name, is.name, is.mrMax+1, is.nrMax+1, dt.goType)
			for mr := 1; mr <= is.mrMax; mr++ {
				fmt.Fprintf(&tables, "%d: {", mr)
				for nr := 1; nr <= is.nrMax; nr++ {
					fmt.Fprintf(&tables, "%d: %s, ", nr, g.tile(is, dt, mr, nr))
				}
				tables.WriteString("},\n")
			}
			tables.WriteString("}\n\n")
		}
		for _, dt := range dtypes {
			g.dot(is, dt)
		}
		g.streams(is)
		g.axpyRows(is)
	}
	g.g.WriteString(tables.String())
	src, err := format.Source(g.g.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "asm_amd64.go"), src, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "kernels_amd64.s"), g.s.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
