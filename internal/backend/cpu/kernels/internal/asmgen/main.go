// Command asmgen writes the amd64 assembly of package kernels
// (kernels_amd64.s) and its Go declarations (asm_amd64.go).
//
// Run it with `go generate` in internal/backend/cpu/kernels. The generated code is
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

// axpyRowsMax is the most rows of y one axpyRows kernel updates.
const axpyRowsMax = 4

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
//
// Without prefetch (the "hot" tiles) the kernel is the same but for the
// prefetches: for weights already in L1, such as rows just decoded into
// scratch, where prefetching the rows after the last ones reaches past
// the scratch into memory that may not be mapped and costs a page walk
// each time (6× slower in measurement).
func (g *gen) tile(is isa, dt dtype, mr, nr int, prefetch bool) string {
	name := fmt.Sprintf("tile%s_%s_%dx%d", dt.name, is.name, mr, nr)
	pfInstr := pfInstr
	if !prefetch {
		name = fmt.Sprintf("tile%shot_%s_%dx%d", dt.name, is.name, mr, nr)
		pfInstr = ""
	}
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
		g.maskK1("R14")
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
		g.maskK1("R14")
		body(0, 0, true)
	}
	g.label(done)
	g.a("VZEROUPPER")
	g.a("RET")
	g.s.WriteString("\n")
}

// maskK1 sets K1 to the low CX bits (a masked tail of CX lanes), using tmp.
func (g *gen) maskK1(tmp string) {
	g.a("MOVL $1, %s", tmp)
	g.a("SHLL CX, %s", tmp)
	g.a("DECL %s", tmp)
	g.a("KMOVW %s, K1", tmp)
}

// returnSum adds the lanes of vector register 0 and returns the sum as the
// float32 result at ret+24(FP).
func (g *gen) returnSum(is isa) {
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
		g.maskK1("R14")
		load(0, is.reg(1), is.reg(4), true)
	}
	g.label(reduce)
	g.a("VADDPS %s, %s, %s", is.reg(1), is.reg(0), is.reg(0))
	g.a("VADDPS %s, %s, %s", is.reg(3), is.reg(2), is.reg(2))
	g.a("VADDPS %s, %s, %s", is.reg(2), is.reg(0), is.reg(0))
	g.returnSum(is)
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

// rotLoop emits the loop of the rotation kernels: AX runs from -n up to
// 0 in steps of 4 vectors, then 1; n is a multiple of the vector width (the
// Go caller rotates the rest). body(r, off) handles vector r at element
// offset off.
func (g *gen) rotLoop(is isa, body func(r, off int)) {
	g.a("MOVQ CX, AX")
	g.a("NEGQ AX")
	loop4, loop1, done := g.newLabel("loop4_"), g.newLabel("loop1_"), g.newLabel("done_")
	g.label(loop4)
	g.a("CMPQ AX, $-%d", 4*is.lanes)
	g.a("JGT %s", loop1)
	for r := range 4 {
		body(r, r*is.lanes)
	}
	g.a("ADDQ $%d, AX", 4*is.lanes)
	g.a("JMP %s", loop4)
	g.label(loop1)
	g.a("TESTQ AX, AX")
	g.a("JEQ %s", done)
	body(0, 0)
	g.a("ADDQ $%d, AX", is.lanes)
	g.a("JMP %s", loop1)
	g.label(done)
	g.a("VZEROUPPER")
	g.a("RET")
	g.s.WriteString("\n")
}

// maxF32 writes max_<isa>(x *float32, n int) float32: the largest of the
// n elements, NaNs skipped, -Inf when there are none: four running maxima
// over 4 vectors per iteration, then one vector per iteration, then
// (AVX-512) a masked tail merged over -Inf; AVX2 handles n rounded down to
// 8. Each VMAXPS takes the loaded vector as its first source and the running
// maximum as its second, which MAXPS returns when either is a NaN.
func (g *gen) maxF32(is isa) {
	name := "max_" + is.name
	args := "x *float32, n int"
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s) float32\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s) float32\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-20\n", name)
	g.a("MOVQ x+0(FP), SI")
	g.a("MOVQ n+8(FP), CX")
	g.a("LEAQ (SI)(CX*4), SI")
	g.a("MOVQ CX, AX")
	g.a("NEGQ AX")
	ninf := is.reg(4)
	g.a("VBROADCASTSS maxninf<>(SB), %s", ninf)
	for a := range 4 {
		g.a("VMOVAPS %s, %s", ninf, is.reg(a))
	}
	loop4, loop1, tail, reduce := g.newLabel("loop4_"), g.newLabel("loop1_"), g.newLabel("tail_"), g.newLabel("reduce_")
	g.label(loop4)
	g.a("CMPQ AX, $-%d", 4*is.lanes)
	g.a("JGT %s", loop1)
	for c := range 4 {
		g.a("VMOVUPS %d(SI)(AX*4), %s", c*is.lanes*4, is.reg(5+c))
		g.a("VMAXPS %s, %s, %s", is.reg(c), is.reg(5+c), is.reg(c))
	}
	g.a("ADDQ $%d, AX", 4*is.lanes)
	g.a("JMP %s", loop4)
	g.label(loop1)
	g.a("CMPQ AX, $-%d", is.lanes)
	g.a("JGT %s", tail)
	g.a("VMOVUPS (SI)(AX*4), %s", is.reg(5))
	g.a("VMAXPS %s, %s, %s", is.reg(0), is.reg(5), is.reg(0))
	g.a("ADDQ $%d, AX", is.lanes)
	g.a("JMP %s", loop1)
	g.label(tail)
	if is.masked {
		g.a("TESTQ AX, AX")
		g.a("JEQ %s", reduce)
		g.a("MOVQ AX, CX")
		g.a("NEGQ CX")
		g.maskK1("R14")
		g.a("VMOVAPS %s, %s", ninf, is.reg(5))
		g.a("VMOVUPS (SI)(AX*4), K1, %s", is.reg(5))
		g.a("VMAXPS %s, %s, %s", is.reg(0), is.reg(5), is.reg(0))
	}
	g.label(reduce)
	g.a("VMAXPS %s, %s, %s", is.reg(1), is.reg(0), is.reg(0))
	g.a("VMAXPS %s, %s, %s", is.reg(3), is.reg(2), is.reg(2))
	g.a("VMAXPS %s, %s, %s", is.reg(2), is.reg(0), is.reg(0))
	if is.masked {
		g.a("VEXTRACTF64X4 $1, Z0, Y1")
		g.a("VMAXPS Y1, Y0, Y0")
	}
	g.a("VEXTRACTF128 $1, Y0, X1")
	g.a("VMAXPS X1, X0, X0")
	g.a("VMOVHLPS X0, X0, X1")
	g.a("VMAXPS X1, X0, X0")
	g.a("VMOVSHDUP X0, X1")
	g.a("VMAXSS X1, X0, X0")
	g.a("VZEROUPPER")
	g.a("MOVSS X0, ret+16(FP)")
	g.a("RET")
	g.s.WriteString("\n")
}

// rotatePairs writes rotatePairs_<isa>(v, c, s, n): each interleaved pair
// (v[2i], v[2i+1]) becomes (v[2i]·c[i] − v[2i+1]·s[i], v[2i]·s[i] +
// v[2i+1]·c[i]) for 2i < n, every product rounded, then the sum, as plain
// Go rounds it: RoPE's layout in GGUF files. c and s are widened to pairs
// in registers (VPMOVZXDQ, then VMOVSLDUP copies each even lane to the odd
// one), the pairs are swapped (VPERMILPS), and the even lanes subtract
// (AVX2's VADDSUBPS; on AVX-512 a masked VSUBPS over the VADDPS).
func (g *gen) rotatePairs(is isa) {
	name := "rotatePairs_" + is.name
	args := "v *float32, c *float32, s *float32, n int"
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s)\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s)\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
	g.a("MOVQ n+24(FP), CX")
	g.a("MOVQ v+0(FP), DI")
	g.a("LEAQ (DI)(CX*4), DI")
	g.a("MOVQ c+8(FP), SI")
	g.a("LEAQ (SI)(CX*2), SI")
	g.a("MOVQ s+16(FP), DX")
	g.a("LEAQ (DX)(CX*2), DX")
	if is.masked {
		g.a("MOVL $0x5555, R14")
		g.a("KMOVW R14, K2")
	}
	g.rotLoop(is, func(r, off int) {
		v, c, sn, w := is.reg(r), is.reg(4+r), is.reg(8+r), is.reg(12+r)
		g.a("VMOVUPS %d(DI)(AX*4), %s", off*4, v)
		g.a("VPMOVZXDQ %d(SI)(AX*2), %s", off*2, c)
		g.a("VMOVSLDUP %s, %s", c, c)
		g.a("VPMOVZXDQ %d(DX)(AX*2), %s", off*2, sn)
		g.a("VMOVSLDUP %s, %s", sn, sn)
		g.a("VPERMILPS $0xb1, %s, %s", v, w)
		g.a("VMULPS %s, %s, %s", v, c, c)   // v·c
		g.a("VMULPS %s, %s, %s", w, sn, sn) // swapped v·s
		if is.masked {
			g.a("VADDPS %s, %s, %s", sn, c, v)
			g.a("VSUBPS %s, %s, K2, %s", sn, c, v)
		} else {
			g.a("VADDSUBPS %s, %s, %s", sn, c, v)
		}
		g.a("VMOVUPS %s, %d(DI)(AX*4)", v, off*4)
	})
}

// rotateHalves writes rotateHalves_<isa>(x, y, c, s, n): for i < n,
// (x[i], y[i]) becomes (x[i]·c[i] − y[i]·s[i], x[i]·s[i] + y[i]·c[i]),
// every product rounded, then the sum: RoPE's NeoX layout, whose pairs are
// the two halves of a head.
func (g *gen) rotateHalves(is isa) {
	name := "rotateHalves_" + is.name
	args := "x *float32, y *float32, c *float32, s *float32, n int"
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s)\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s)\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-40\n", name)
	g.a("MOVQ n+32(FP), CX")
	for i, p := range [][2]string{{"x", "DI"}, {"y", "SI"}, {"c", "DX"}, {"s", "R8"}} {
		g.a("MOVQ %s+%d(FP), %s", p[0], 8*i, p[1])
		g.a("LEAQ (%s)(CX*4), %s", p[1], p[1])
	}
	g.rotLoop(is, func(r, off int) {
		x, y, t, u := is.reg(r), is.reg(4+r), is.reg(8+r), is.reg(12+r)
		g.a("VMOVUPS %d(DI)(AX*4), %s", off*4, x)
		g.a("VMOVUPS %d(SI)(AX*4), %s", off*4, y)
		g.a("VMULPS %d(DX)(AX*4), %s, %s", off*4, x, t) // x·c
		g.a("VMULPS %d(R8)(AX*4), %s, %s", off*4, y, u) // y·s
		g.a("VSUBPS %s, %s, %s", u, t, t)
		g.a("VMULPS %d(R8)(AX*4), %s, %s", off*4, x, x) // x·s
		g.a("VMULPS %d(DX)(AX*4), %s, %s", off*4, y, y) // y·c
		g.a("VADDPS %s, %s, %s", y, x, x)
		g.a("VMOVUPS %s, %d(DI)(AX*4)", t, off*4)
		g.a("VMOVUPS %s, %d(SI)(AX*4)", x, off*4)
	})
}

// axpyRows writes axpyRows<mr>_<isa>(y, ldy, p, ldp, v, ldv, rows, n), or
// with half axpyRowsF16_<mr>_<isa> whose v holds IEEE halves:
// for r = 0..rows-1 in order, y[i·ldy+j] += p[i·ldp+r]·v[r·ldv+j] for
// i < mr, j < n, one FMA per term, as axpy rounds it. Each row of v is
// loaded once for the mr rows of y. Columns go in chunks of cv vectors held
// in registers across all rows of v, then single vectors, then (AVX-512) a
// masked tail; AVX2 handles n rounded down to a multiple of 8.
func (g *gen) axpyRows(is isa, mr int, half bool) string {
	cv := 4
	if !is.masked {
		cv = 2
	}
	name, vt, vsize := fmt.Sprintf("axpyRows%d_%s", mr, is.name), "float32", 4
	if half {
		name, vt, vsize = fmt.Sprintf("axpyRowsF16_%d_%s", mr, is.name), "uint16", 2
	}
	args := "y *float32, ldy int, p *float32, ldp int, v *" + vt + ", ldv int, rows int, n int"
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s)\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s)\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	g.a("MOVQ y+0(FP), DI")
	g.a("MOVQ ldy+8(FP), BX")
	g.a("SHLQ $2, BX")
	g.a("LEAQ (BX)(BX*2), AX")
	g.a("MOVQ p+16(FP), SI")
	g.a("MOVQ ldp+24(FP), R13")
	g.a("SHLQ $2, R13")
	g.a("LEAQ (R13)(R13*2), R14")
	g.a("MOVQ v+32(FP), DX")
	g.a("MOVQ ldv+40(FP), R8")
	g.a("SHLQ $%d, R8", log2(vsize))
	g.a("MOVQ rows+48(FP), R9")
	g.a("MOVQ n+56(FP), CX")
	// row i of y and of p, by base register.
	rowAddr := func(base string, i int) string {
		switch i {
		case 0:
			return "(" + base + ")"
		case 1, 2:
			st := map[string]string{"DI": "BX", "R11": "R13"}[base]
			return fmt.Sprintf("(%s)(%s*%d)", base, st, i)
		}
		st := map[string]string{"DI": "AX", "R11": "R14"}[base]
		return fmt.Sprintf("(%s)(%s*1)", base, st)
	}
	chunk := func(nv int, masked bool) {
		z, k := "", ""
		if masked {
			z, k = ".Z", "K1, "
		}
		acc := func(i, c int) string { return is.reg(i*nv + c) }
		vr := func(c int) string { return is.reg(mr*nv + c) }
		bcast := is.reg(mr*nv + nv)
		for i := 0; i < mr; i++ {
			for c := 0; c < nv; c++ {
				g.a("VMOVUPS%s %d%s, %s%s", z, c*is.lanes*4, rowAddr("DI", i), k, acc(i, c))
			}
		}
		g.a("MOVQ DX, R10")
		g.a("MOVQ SI, R11")
		g.a("MOVQ R9, R12")
		loop, done := g.newLabel("rows_"), g.newLabel("rowsdone_")
		g.label(loop)
		g.a("TESTQ R12, R12")
		g.a("JEQ %s", done)
		for c := 0; c < nv; c++ {
			if half {
				g.a("VCVTPH2PS%s %d(R10), %s%s", z, c*is.lanes*2, k, vr(c))
			} else {
				g.a("VMOVUPS%s %d(R10), %s%s", z, c*is.lanes*4, k, vr(c))
			}
		}
		for i := 0; i < mr; i++ {
			g.a("VBROADCASTSS %s, %s", rowAddr("R11", i), bcast)
			for c := 0; c < nv; c++ {
				g.a("VFMADD231PS %s, %s, %s", vr(c), bcast, acc(i, c))
			}
		}
		g.a("ADDQ R8, R10")
		g.a("ADDQ $4, R11")
		g.a("DECQ R12")
		g.a("JMP %s", loop)
		g.label(done)
		for i := 0; i < mr; i++ {
			for c := 0; c < nv; c++ {
				g.a("VMOVUPS %s, %s%d%s", acc(i, c), k, c*is.lanes*4, rowAddr("DI", i))
			}
		}
		g.a("ADDQ $%d, DI", nv*is.lanes*4)
		g.a("ADDQ $%d, DX", nv*is.lanes*vsize)
	}
	loopN, loop1, tail, ret := g.newLabel("colsN_"), g.newLabel("cols1_"), g.newLabel("colstail_"), g.newLabel("ret_")
	g.label(loopN)
	g.a("CMPQ CX, $%d", cv*is.lanes)
	g.a("JLT %s", loop1)
	chunk(cv, false)
	g.a("SUBQ $%d, CX", cv*is.lanes)
	g.a("JMP %s", loopN)
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
		g.maskK1("R12")
		chunk(1, true)
	}
	g.label(ret)
	g.a("VZEROUPPER")
	g.a("RET")
	g.s.WriteString("\n")
	return name
}

// expConsts are the constants of expSum, in expconst<> at 4-byte offsets:
// e^x = 2^n·e^r with n = round(x·log2 e) (by the 1.5·2^23 trick) and
// r = x - n·ln2 (ln2 split in two so r is exact), e^r by its degree-6
// Taylor polynomial, 2^n built in the exponent bits; below -87 the result is 0.
var expConsts = []struct {
	name string
	bits uint32
}{
	{"min", 0xc2ae0000},   // -87
	{"log2e", 0x3fb8aa3b}, // 1.442695041
	{"magic", 0x4b400000}, // 1.5·2^23
	{"ln2hi", 0x3f317200}, // 0.693145752
	{"ln2lo", 0x35bfbe8e}, // 1.42860677e-6
	{"c6", 0x3ab60b61},    // 1/720
	{"c5", 0x3c088889},    // 1/120
	{"c4", 0x3d2aaaab},    // 1/24
	{"c3", 0x3e2aaaab},    // 1/6
	{"c2", 0x3f000000},    // 1/2
	{"one", 0x3f800000},   // 1
	{"bias", 0x4b3fff81},  // bits(1.5·2^23) - 127, as an integer
	{"max", 0x42b00000},   // 88: e^88 is still a finite float32
	{"sign", 0x80000000},  // the sign bit
}

func expConst(name string) string {
	for i, c := range expConsts {
		if c.name == name {
			return fmt.Sprintf("expconst<>+%d(SB)", 4*i)
		}
	}
	panic(name)
}

// expSum writes expSum_<isa>(x *float32, n int, mx float32) float32: x[i]
// = e^(x[i]-mx) (0 where x[i]-mx < -87 or is NaN), returning their sum in
// one vector accumulator, reduced at the end: the order of the additions
// depends on n alone. AVX2 handles n rounded down to a multiple of 8.
func (g *gen) expSum(is isa) {
	name := "expSum_" + is.name
	args := "x *float32, n int, mx float32"
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s) float32\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s) float32\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-28\n", name)
	acc, x, t, y, nn, p, mx, msk := is.reg(0), is.reg(1), is.reg(2), is.reg(3), is.reg(4), is.reg(5), is.reg(6), is.reg(7)
	g.a("MOVQ x+0(FP), DI")
	g.a("MOVQ n+8(FP), CX")
	g.a("VBROADCASTSS mx+16(FP), %s", mx)
	g.a("VXORPS %s, %s, %s", acc, acc, acc)
	body := func(masked bool) {
		g.a("VSUBPS %s, %s, %s", mx, x, x) // x - mx
		g.exp(is, x, t, y, nn, p, msk)
		if masked {
			g.a("VMOVUPS %s, K1, (DI)", x)
			g.a("VADDPS %s, %s, K1, %s", x, acc, acc)
		} else {
			g.a("VMOVUPS %s, (DI)", x)
			g.a("VADDPS %s, %s, %s", x, acc, acc)
		}
	}
	loop, tail, reduce := g.newLabel("exp_"), g.newLabel("exptail_"), g.newLabel("expreduce_")
	g.label(loop)
	g.a("CMPQ CX, $%d", is.lanes)
	g.a("JLT %s", tail)
	g.a("VMOVUPS (DI), %s", x)
	body(false)
	g.a("ADDQ $%d, DI", is.lanes*4)
	g.a("SUBQ $%d, CX", is.lanes)
	g.a("JMP %s", loop)
	g.label(tail)
	if is.masked {
		g.a("TESTQ CX, CX")
		g.a("JEQ %s", reduce)
		g.maskK1("R12")
		g.a("VMOVUPS.Z (DI), K1, %s", x)
		body(true)
	}
	g.label(reduce)
	g.returnSum(is)
}

// exp replaces the vector x with e^x for x in [-87, 88] (0 below -87 and
// for NaN), using t, y, n and p as scratch and msk (AVX2) or K2 (AVX-512)
// for the range mask: the algorithm of expConsts.
func (g *gen) exp(is isa, x, t, y, nn, p, msk string) {
	g.a("VBROADCASTSS %s, %s", expConst("min"), t)
	if is.masked {
		g.a("VCMPPS $0x1d, %s, %s, K2", t, x) // x >= -87, false for NaN
	} else {
		g.a("VCMPPS $0x1d, %s, %s, %s", t, x, msk)
	}
	g.a("VBROADCASTSS %s, %s", expConst("log2e"), t)
	g.a("VBROADCASTSS %s, %s", expConst("magic"), y)
	g.a("VFMADD231PS %s, %s, %s", t, x, y) // y = x·log2e + magic
	g.a("VBROADCASTSS %s, %s", expConst("magic"), t)
	g.a("VSUBPS %s, %s, %s", t, y, nn) // n = y - magic
	g.a("VBROADCASTSS %s, %s", expConst("ln2hi"), t)
	g.a("VFNMADD231PS %s, %s, %s", t, nn, x) // r = x - n·ln2hi
	g.a("VBROADCASTSS %s, %s", expConst("ln2lo"), t)
	g.a("VFNMADD231PS %s, %s, %s", t, nn, x) // r -= n·ln2lo
	g.a("VBROADCASTSS %s, %s", expConst("c6"), p)
	for _, c := range []string{"c5", "c4", "c3", "c2", "one", "one"} {
		g.a("VBROADCASTSS %s, %s", expConst(c), t)
		g.a("VFMADD213PS %s, %s, %s", t, x, p) // p = p·r + c
	}
	g.a("VBROADCASTSS %s, %s", expConst("bias"), t)
	g.a("VPSUBD %s, %s, %s", t, y, y) // n + 127
	g.a("VPSLLD $23, %s, %s", y, y)   // 2^n
	if is.masked {
		g.a("VMULPS.Z %s, %s, K2, %s", y, p, x)
	} else {
		g.a("VMULPS %s, %s, %s", y, p, x)
		g.a("VANDPS %s, %s, %s", msk, x, x)
	}
}

// silu writes silu_<isa>(y, x *float32, n int) and swiglu_<isa>(y, gate,
// up *float32, n int): y = x / (1 + e^min(-x, 88)), times up for SwiGLU.
// AVX2 handles n rounded down to a multiple of 8.
func (g *gen) silu(is isa, glu bool) {
	name, args := "silu_"+is.name, "y *float32, x *float32, n int"
	if glu {
		name, args = "swiglu_"+is.name, "y *float32, x *float32, up *float32, n int"
	}
	frame := 24
	if glu {
		frame = 32
	}
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(%s)\n\n", name, args)
	fmt.Fprintf(&g.s, "// func %s(%s)\n", name, args)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", name, frame)
	x, e, t, y, nn, p, msk, one := is.reg(0), is.reg(1), is.reg(2), is.reg(3), is.reg(4), is.reg(5), is.reg(6), is.reg(7)
	g.a("MOVQ y+0(FP), DI")
	g.a("MOVQ x+8(FP), SI")
	if glu {
		g.a("MOVQ up+16(FP), DX")
		g.a("MOVQ n+24(FP), CX")
	} else {
		g.a("MOVQ n+16(FP), CX")
	}
	g.a("VBROADCASTSS %s, %s", expConst("one"), one)
	body := func(masked bool) {
		z, k := "", ""
		if masked {
			z, k = ".Z", "K1, "
		}
		g.a("VMOVUPS%s (SI), %s%s", z, k, x)
		g.a("VBROADCASTSS %s, %s", expConst("sign"), t)
		g.a("VXORPS %s, %s, %s", t, x, e) // -x
		g.a("VBROADCASTSS %s, %s", expConst("max"), t)
		g.a("VMINPS %s, %s, %s", t, e, e)
		g.exp(is, e, t, y, nn, p, msk)
		g.a("VADDPS %s, %s, %s", one, e, e) // 1 + e^-x
		g.a("VDIVPS %s, %s, %s", e, x, x)   // x / (1 + e^-x)
		if glu {
			g.a("VMOVUPS%s (DX), %s%s", z, k, t)
			g.a("VMULPS %s, %s, %s", t, x, x)
		}
		g.a("VMOVUPS %s, %s(DI)", x, k)
	}
	loop, tail, ret := g.newLabel("silu_"), g.newLabel("silutail_"), g.newLabel("siluret_")
	g.label(loop)
	g.a("CMPQ CX, $%d", is.lanes)
	g.a("JLT %s", tail)
	body(false)
	g.a("ADDQ $%d, DI", is.lanes*4)
	g.a("ADDQ $%d, SI", is.lanes*4)
	if glu {
		g.a("ADDQ $%d, DX", is.lanes*4)
	}
	g.a("SUBQ $%d, CX", is.lanes)
	g.a("JMP %s", loop)
	g.label(tail)
	if is.masked {
		g.a("TESTQ CX, CX")
		g.a("JEQ %s", ret)
		g.maskK1("R12")
		body(true)
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
	g.s.WriteString("// expconst<>: the constants of expSum (see expConsts in internal/asmgen).\n")
	for i, c := range expConsts {
		fmt.Fprintf(&g.s, "DATA expconst<>+%d(SB)/4, $0x%08x // %s\n", 4*i, c.bits, c.name)
	}
	fmt.Fprintf(&g.s, "GLOBL expconst<>(SB), RODATA|NOPTR, $%d\n\n", 4*len(expConsts))
	g.g.WriteString("// Code generated by internal/asmgen; DO NOT EDIT.\n\n//go:build amd64 && !noasm\n\npackage kernels\n\n")
	var tables strings.Builder
	for _, is := range isas {
		for _, dt := range dtypes {
			fmt.Fprintf(&tables, "// tiles%s_%s[mr][nr] computes an mr×nr tile (mr ≤ %d, nr ≤ %d).\n", dt.name, is.name, is.mrMax, is.nrMax)
			fmt.Fprintf(&tables, "var tiles%s_%s = [%d][%d]func(x *float32, ldx int, w *%s, ldw int, k int, y *float32, ldy int){\n", dt.name, is.name, is.mrMax+1, is.nrMax+1, dt.goType)
			for mr := 1; mr <= is.mrMax; mr++ {
				fmt.Fprintf(&tables, "%d: {", mr)
				for nr := 1; nr <= is.nrMax; nr++ {
					fmt.Fprintf(&tables, "%d: %s, ", nr, g.tile(is, dt, mr, nr, true))
				}
				tables.WriteString("},\n")
			}
			tables.WriteString("}\n\n")
		}
		// One row of x over float32 weights in L1 (MatMulBlocks' scratch).
		fmt.Fprintf(&tables, "// tilesF32hot_%s[1][nr] is tilesF32_%s[1][nr] without prefetching.\n", is.name, is.name)
		fmt.Fprintf(&tables, "var tilesF32hot_%s = [2][%d]func(x *float32, ldx int, w *float32, ldw int, k int, y *float32, ldy int){\n1: {", is.name, is.nrMax+1)
		for nr := 1; nr <= is.nrMax; nr++ {
			fmt.Fprintf(&tables, "%d: %s, ", nr, g.tile(is, dtypes[0], 1, nr, false))
		}
		tables.WriteString("},\n}\n\n")
		for _, dt := range dtypes {
			g.dot(is, dt)
		}
		g.streams(is)
		g.expSum(is)
		g.silu(is, false)
		g.silu(is, true)
		for _, half := range []bool{false, true} {
			tbl, vt := "axpyRows_"+is.name, "float32"
			if half {
				tbl, vt = "axpyRowsF16_"+is.name, "uint16"
			}
			fmt.Fprintf(&tables, "// %s[mr] adds weighted rows of v to mr rows of y (1 ≤ mr ≤ %d).\n", tbl, axpyRowsMax)
			fmt.Fprintf(&tables, "var %s = [%d]func(y *float32, ldy int, p *float32, ldp int, v *%s, ldv int, rows int, n int){\n", tbl, axpyRowsMax+1, vt)
			for mr := 1; mr <= axpyRowsMax; mr++ {
				fmt.Fprintf(&tables, "%d: %s,\n", mr, g.axpyRows(is, mr, half))
			}
			tables.WriteString("}\n\n")
		}
	}
	// After the rest, so that adding them renumbered no other kernel's labels.
	g.s.WriteString("DATA maxninf<>+0(SB)/4, $0xff800000 // -Inf\nGLOBL maxninf<>(SB), RODATA|NOPTR, $4\n\n")
	for _, is := range isas {
		g.rotatePairs(is)
		g.rotateHalves(is)
		g.maxF32(is)
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
