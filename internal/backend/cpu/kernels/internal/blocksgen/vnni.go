package main

import "fmt"

// VNNI products with Q6_K blocks: y = x·wᵀ with x quantized per row to
// int8 in blocks of 32 by the affine kernels' vnniPrep (8-bit chunk layout:
// per 64 elements, 64 int8 values then 16 float32 lane scales, the scale of
// each int32 lane's x block) and w's codes unpacked to bytes in registers.
//
// A block's 256 elements are four chunks of 64; chunk c (elements
// 64c..64c+63) is, byte for byte, the low (c even) or high (c odd) nibbles
// of ql[64h..64h+63], h = c/2, with bits 2s, 2s+1 of qh[32h + l] as bits 4
// and 5 (s = 0..3 over the chunks' 32-element quarters). VPDPBUSD sums four
// products code·x per int32 lane, starting from the lane's -32·Σx (the
// caller's nsum, per row of x), so a lane holds Σ (q-32)·x exactly. Each
// lane is then converted to float, multiplied by its x scale, then by its
// weight scale d·scales[sub-block] (exact: an f16 times an int8), and added
// to the row's float accumulator for even or odd chunks; the row's result
// is the sum of the two accumulators' lanes in a fixed tree:
// acc = acc0 + acc1, then lanes l and l+8, l and l+4, l and l+2, l and l+1.
// No product is fused with a sum, so a pure-Go reference reproduces every
// bit (kernels' q6KVNNIRef), and every row of x gets the same instructions
// whatever mr is.
//
// Registers: DI x row 0, BX the walking x, R10 ldx, R14 3·ldx; R9 nsum row
// 0 (rows ldx bytes apart too), R8 walking; SI the blocks (walking on
// through every row of w); DX y, R13 ldy in bytes, AX 3·ldy; R11 rows of w
// left, R12 blocks per row, CX block counter.
//
//	Z0..Z7   float accumulators, acc(r, j) = 2r + j
//	Z8..Z11  row r's lane sums
//	Z17      high nibbles, Z18 weight scales of the chunk, Z19 its codes
//	Z20 qh (32 bytes in both halves), Z21 ql, Z22 d·scales, Z23 d
//	Z24..Z27 VPERMPS indices of chunks 0..3: lane l → sub-block 4c + l/4
//	Z28 word shifts right (0, 2), Z29 word shifts left (4, 2)
//	Z30 bytes 0x30, Z31 bytes 0x0f

const vnniSig = "(x *byte, ldx int, nsum *int32, blk *byte, blocks int, n int, y *float32, ldy int)"

// vnniPrefetch is how far ahead of the block being read (bytes) the
// kernels prefetch the blocks; 0 turns prefetching off.
var vnniPrefetch = 4096

// vnniMaxRows is the most rows of x one kernel call takes.
const vnniMaxRows = 4

func vrow(base string, r, off int) string {
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

func vyrow(r int) string {
	return [...]string{"(DX)", "(DX)(R13*1)", "(DX)(R13*2)", "(DX)(AX*1)"}[r]
}

// vnniData emits the constant tables of the VNNI kernels.
func (g *gen) vnniData() {
	g.s.WriteString("\n// blocksperm6: chunk c's lane l takes Q6_K sub-block 4c + l/4.\n")
	for c := range 4 {
		for l := range 16 {
			fmt.Fprintf(&g.s, "DATA blocksperm6<>+%d(SB)/4, $%d\n", 64*c+4*l, 4*c+l/4)
		}
	}
	g.s.WriteString("GLOBL blocksperm6<>(SB), RODATA|NOPTR, $256\n")
	g.s.WriteString("\n// blocksshift6: word shifts, right 0 then 2 (16 words each), left 4 then 2.\n")
	for i, v := range []int{0, 2, 4, 2} {
		for w := range 16 {
			fmt.Fprintf(&g.s, "DATA blocksshift6<>+%d(SB)/2, $%d\n", 32*i+2*w, v)
		}
	}
	g.s.WriteString("GLOBL blocksshift6<>(SB), RODATA|NOPTR, $128\n")
	g.s.WriteString("DATA blocksb0f<>+0(SB)/4, $0x0f0f0f0f\nGLOBL blocksb0f<>(SB), RODATA|NOPTR, $4\n")
	g.s.WriteString("DATA blocksb30<>+0(SB)/4, $0x30303030\nGLOBL blocksb30<>(SB), RODATA|NOPTR, $4\n")
}

// q6KVNNI emits the kernel for mr rows of x: for each of n rows of w
// (blocks blocks each), y[r·ldy] = Σ x[r]·w, y advancing by one per row.
func (g *gen) q6KVNNI(mr int) {
	name := fmt.Sprintf("q6KVNNI%d", mr)
	fmt.Fprintf(&g.s, "\n// func %s%s\n", name, vnniSig)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s%s\n\n", name, vnniSig)
	g.a("MOVQ x+0(FP), DI")
	g.a("MOVQ ldx+8(FP), R10")
	g.a("LEAQ (R10)(R10*2), R14")
	g.a("MOVQ nsum+16(FP), R9")
	g.a("MOVQ blk+24(FP), SI")
	g.a("MOVQ blocks+32(FP), R12")
	g.a("MOVQ n+40(FP), R11")
	g.a("MOVQ y+48(FP), DX")
	g.a("MOVQ ldy+56(FP), R13")
	g.a("SHLQ $2, R13")
	g.a("LEAQ (R13)(R13*2), AX")
	g.a("VPBROADCASTD blocksb0f<>(SB), Z31")
	g.a("VPBROADCASTD blocksb30<>(SB), Z30")
	g.a("VMOVDQU16 blocksshift6<>+64(SB), Z29")
	g.a("VMOVDQU16 blocksshift6<>+0(SB), Z28")
	for c := range 4 {
		g.a("VMOVDQU32 blocksperm6<>+%d(SB), Z%d", 64*c, 24+c)
	}
	g.a("TESTQ R11, R11")
	g.a("JEQ %s_done", name)
	fmt.Fprintf(&g.s, "%s_row:\n", name)
	g.a("MOVQ DI, BX")
	g.a("MOVQ R9, R8")
	g.a("MOVQ R12, CX")
	for r := range mr {
		for j := range 2 {
			a := 2*r + j
			g.a("VPXORD Z%d, Z%d, Z%d", a, a, a)
		}
	}
	fmt.Fprintf(&g.s, "%s_block:\n", name)
	if vnniPrefetch > 0 {
		for l := 0; l < 210; l += 64 {
			g.a("PREFETCHT0 %d(SI)", vnniPrefetch+l)
		}
	}
	g.a("VPBROADCASTW 208(SI), Y23")
	g.a("VCVTPH2PS Y23, Z23")
	g.a("VPMOVSXBD 192(SI), Z22")
	g.a("VCVTDQ2PS Z22, Z22")
	g.a("VMULPS Z23, Z22, Z22")
	for h := range 2 {
		g.a("VMOVDQU64 %d(SI), Z21", 64*h)
		g.a("VBROADCASTI64X4 %d(SI), Z20", 128+32*h)
		for u := range 2 {
			c := 2*h + u
			// Codes: the nibbles | qh's two bits at bits 4, 5.
			nib := "Z21"
			if u == 0 {
				g.a("VPSLLVW Z29, Z20, Z19")
			} else {
				g.a("VPSRLW $4, Z21, Z17")
				g.a("VPSRLVW Z28, Z20, Z19")
				nib = "Z17"
			}
			g.a("VPANDQ Z30, Z19, Z19")
			g.a("VPTERNLOGD $0xf8, Z31, %s, Z19", nib) // Z19 | (nib & 0x0f)
			g.a("VPERMPS Z22, Z%d, Z18", 24+c)
			for r := range mr {
				t := 8 + r
				g.a("VMOVDQU32 %s, Z%d", vrow("R8", r, 64*c), t)
				g.a("VPDPBUSD %s, Z19, Z%d", vrow("BX", r, 128*c), t)
				g.a("VCVTDQ2PS Z%d, Z%d", t, t)
				g.a("VMULPS %s, Z%d, Z%d", vrow("BX", r, 128*c+64), t, t)
				g.a("VMULPS Z18, Z%d, Z%d", t, t)
				g.a("VADDPS Z%d, Z%d, Z%d", t, 2*r+u, 2*r+u)
			}
		}
	}
	g.a("ADDQ $210, SI")
	g.a("ADDQ $512, BX")
	g.a("ADDQ $256, R8")
	g.a("DECQ CX")
	g.a("JNE %s_block", name)
	for r := range mr {
		a0, a1 := 2*r, 2*r+1
		g.a("VADDPS Z%d, Z%d, Z%d", a1, a0, a0)
		g.a("VEXTRACTF64X4 $1, Z%d, Y%d", a0, a1)
		g.a("VADDPS Y%d, Y%d, Y%d", a1, a0, a0)
		g.a("VEXTRACTF128 $1, Y%d, X%d", a0, a1)
		g.a("VADDPS X%d, X%d, X%d", a1, a0, a0)
		g.a("VMOVHLPS X%d, X%d, X%d", a0, a0, a1)
		g.a("VADDPS X%d, X%d, X%d", a1, a0, a0)
		g.a("VMOVSHDUP X%d, X%d", a0, a1)
		g.a("VADDSS X%d, X%d, X%d", a1, a0, a0)
		g.a("VMOVSS X%d, %s", a0, vyrow(r))
	}
	g.a("ADDQ $4, DX")
	g.a("DECQ R11")
	g.a("JNE %s_row", name)
	fmt.Fprintf(&g.s, "%s_done:\n", name)
	g.a("VZEROUPPER")
	g.a("RET")
}
