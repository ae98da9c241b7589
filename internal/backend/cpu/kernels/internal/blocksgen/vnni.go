package main

import "fmt"

// VNNI products with Q6_K blocks: y = x·wᵀ with x quantized per row to
// int8 in blocks of 32 by the affine kernels' vnniPrep (8-bit chunk layout:
// per 64 elements, 64 int8 values then 16 float32 lane scales), reordered
// per block of 256 by kernels' transposeVNNIBlocks to match the transposed
// codes below, and w's codes unpacked to bytes in registers.
//
// A block's 256 elements are four chunks of 64; chunk c (elements
// 64c..64c+63) is, byte for byte, the low (c even) or high (c odd) nibbles
// of ql[64h..64h+63], h = c/2, with bits 2s, 2s+1 of qh[32h + l] as bits 4
// and 5 (s = 0..3 over the chunks' 32-element quarters). The four chunks'
// codes are then transposed as dwords within each 128-bit lane
// (vnniTranspose), so that int32 lane 4g+c of the four registers holds
// together the 16 elements 64c+16g..64c+16g+15: one Q6_K sub-block, half a
// Q5_K one, within one x block of 32. For each row of x, four VPDPBUSD
// sum the block's products code·x into the lanes, starting from the lane's
// -32·Σx (the caller's nsum, per row of x and block), so a lane holds
// Σ (q-32)·x of its 16 elements exactly. Each lane is then converted to
// float once a block, multiplied by its x scale, and multiplied by its
// weight scale d·scales[sub-block] (exact: an f16 times an int8) and added
// to the row's float accumulator in one fused multiply-add; the row's
// result is the sum of the accumulator's lanes in a fixed tree: lanes l
// and l+8, l and l+4, l and l+2, l and l+1. The per-row work is thus 7
// instructions a block (not 16 a block, one conversion per 4 elements, as
// before the transposition), which matters for a verification batch; the
// unpacking and transposition are shared by the rows of a call. A pure-Go
// reference reproduces every bit (kernels' q6KVNNIRef, with a float32 FMA
// computed exactly), and every row of x gets the same instructions whatever
// mr is.
//
// Registers: BX the walking x for rows 0..3, R12 for rows 4..5 (rows R10 =
// ldx bytes apart, R14 = 3·ldx); R8 the walking aux for rows 0..3 (Q6_K's
// nsum, Q5_K's group sums; rows ldx bytes apart too), DI for rows 4..5; SI
// the blocks (walking on through every row of w); DX y, R13 ldy in bytes
// (AX a row's offset at the stores); R11 rows of w left, CX the block
// counter.
//
//	Z0..Z5   float accumulators, one per row of x
//	Z6..Z11  Q5_K's bias accumulators
//	Z12..Z15 lane sums (row r uses Z12 + r%4)
//	Z17      high nibbles, Z18 the block's weight scales a lane
//	Z20 qh (32 bytes in both halves), Z21 ql, Z22 d·scales, Z23 d
//	Z24      VPERMPS indices: lane 4g+c → sub-block 4c + g
//	Z25..Z28 the codes of chunks 0..3, then transposed
//	K2 the upper 16 words (masked shifts of the upper copies)
//	Z30 bytes 0x30, Z31 bytes 0x0f

const vnniSig = "(x *byte, ldx int, aux *byte, blk *byte, blocks int, n int, y *float32, ldy int)"

// vnniPrefetch is how far ahead of the block being read (bytes) the
// kernels prefetch the blocks; 0 turns prefetching off.
var vnniPrefetch = 4096

// vnniMaxRows is the most rows of x one kernel call takes: a verification
// batch of 5 or 6 tokens unpacks the blocks once.
const vnniMaxRows = 6

// vrow is the address of row r of x (aux: of aux) at byte offset off.
func vrow(aux bool, r, off int) string {
	base := "BX"
	switch {
	case aux && r < 4:
		base = "R8"
	case aux:
		base = "DI"
	case r >= 4:
		base = "R12"
	}
	switch r % 4 {
	case 0:
		return fmt.Sprintf("%d(%s)", off, base)
	case 1:
		return fmt.Sprintf("%d(%s)(R10*1)", off, base)
	case 2:
		return fmt.Sprintf("%d(%s)(R10*2)", off, base)
	}
	return fmt.Sprintf("%d(%s)(R14*1)", off, base)
}

// vyrow is the address of row r of y (rows 3 and 5 with AX set by vyoff).
func vyrow(r int) string {
	return [...]string{"(DX)", "(DX)(R13*1)", "(DX)(R13*2)", "(DX)(AX*1)", "(DX)(R13*4)", "(DX)(AX*1)"}[r]
}

// vyoff sets AX for vyrow(r) where it needs it.
func (g *gen) vyoff(r int) {
	switch r {
	case 3:
		g.a("LEAQ (R13)(R13*2), AX")
	case 5:
		g.a("LEAQ (R13)(R13*4), AX")
	}
}

// vnniData emits the constant tables of the VNNI kernels.
func (g *gen) vnniData() {
	g.s.WriteString("\n// blocksperm6: lane L = 4g+c of the transposed chunks takes Q6_K sub-block 4c + g.\n")
	for l := range 16 {
		fmt.Fprintf(&g.s, "DATA blocksperm6<>+%d(SB)/4, $%d\n", 4*l, 4*(l%4)+l/4)
	}
	g.s.WriteString("GLOBL blocksperm6<>(SB), RODATA|NOPTR, $64\n")
	g.s.WriteString("DATA blocksb0f<>+0(SB)/4, $0x0f0f0f0f\nGLOBL blocksb0f<>(SB), RODATA|NOPTR, $4\n")
	g.s.WriteString("DATA blocksb30<>+0(SB)/4, $0x30303030\nGLOBL blocksb30<>(SB), RODATA|NOPTR, $4\n")
}

// vnniPrologue starts kernel name: arguments, the constants every format
// uses and consts' own, the row loop's head (zeroed accumulators, x and
// aux rewound) and the block loop's (prefetching the blocks ahead).
func (g *gen) vnniPrologue(name string, mr, blockBytes int, bias bool, consts func()) {
	fmt.Fprintf(&g.s, "\n// func %s%s\n", name, vnniSig)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s%s\n\n", name, vnniSig)
	g.a("MOVL $0xffff0000, AX")
	g.a("KMOVD AX, K2") // the upper 16 words
	g.a("MOVQ ldx+8(FP), R10")
	g.a("LEAQ (R10)(R10*2), R14")
	g.a("MOVQ blk+24(FP), SI")
	g.a("MOVQ n+40(FP), R11")
	g.a("MOVQ y+48(FP), DX")
	g.a("MOVQ ldy+56(FP), R13")
	g.a("SHLQ $2, R13")
	g.a("VPBROADCASTD blocksb0f<>(SB), Z31")
	consts()
	g.a("TESTQ R11, R11")
	g.a("JEQ %s_done", name)
	fmt.Fprintf(&g.s, "%s_row:\n", name)
	g.a("MOVQ x+0(FP), BX")
	g.a("MOVQ aux+16(FP), R8")
	if mr > 4 {
		g.a("LEAQ (BX)(R10*4), R12")
		g.a("LEAQ (R8)(R10*4), DI")
	}
	g.a("MOVQ blocks+32(FP), CX")
	for r := range mr {
		g.a("VPXORD Z%d, Z%d, Z%d", r, r, r)
		if bias {
			g.a("VPXORD Z%d, Z%d, Z%d", 6+r, 6+r, 6+r)
		}
	}
	fmt.Fprintf(&g.s, "%s_block:\n", name)
	if vnniPrefetch > 0 {
		for l := 0; l < blockBytes; l += 64 {
			g.a("PREFETCHT0 %d(SI)", vnniPrefetch+l)
		}
	}
}

// vnniTranspose transposes the dwords of the four chunks' codes in
// Z25..Z28 within each 128-bit lane: afterwards Z25+j's lane 4g+c holds
// chunk c's lane 4g+j (so every lane of Z25..Z28 together covers one
// 16-element run of the block, 64c+16g..64c+16g+15). Z17, Z19, Z20, Z21
// are clobbered.
func (g *gen) vnniTranspose() {
	g.a("VPUNPCKLDQ Z26, Z25, Z17") // a0 b0 a1 b1
	g.a("VPUNPCKHDQ Z26, Z25, Z19") // a2 b2 a3 b3
	g.a("VPUNPCKLDQ Z28, Z27, Z20") // c0 d0 c1 d1
	g.a("VPUNPCKHDQ Z28, Z27, Z21") // c2 d2 c3 d3
	g.a("VPUNPCKLQDQ Z20, Z17, Z25")
	g.a("VPUNPCKHQDQ Z20, Z17, Z26")
	g.a("VPUNPCKLQDQ Z21, Z19, Z27")
	g.a("VPUNPCKHQDQ Z21, Z19, Z28")
}

// vnniRows adds the block's products to the accumulators of every row:
// transposed codes in Z25..Z28, weight scales in Z18; a row's lane sums
// start from aux at offset 0 (Q6_K's -32·Σx) or from zero, take the four
// chunks' VPDPBUSD, and are converted, scaled by x's lane scales (the
// block's first chunk's scale slot) and added once per block.
func (g *gen) vnniRows(mr int, fromAux bool) {
	for r := range mr {
		t := 12 + r%4
		if fromAux {
			g.a("VMOVDQU32 %s, Z%d", vrow(true, r, 0), t)
		} else {
			g.a("VPXORD Z%d, Z%d, Z%d", t, t, t)
		}
		for j := range 4 {
			g.a("VPDPBUSD %s, Z%d, Z%d", vrow(false, r, 128*j), 25+j, t)
		}
		g.a("VCVTDQ2PS Z%d, Z%d", t, t)
		g.a("VMULPS %s, Z%d, Z%d", vrow(false, r, 64), t, t)
		g.a("VFMADD231PS Z18, Z%d, Z%d", t, r) // acc += t·ws
	}
}

// vnniEpilogue ends the block loop (blockBytes, auxBytes per block), sums
// each row's accumulator (and bias accumulator) and stores the results.
func (g *gen) vnniEpilogue(name string, mr, blockBytes, auxBytes int, bias bool) {
	g.a("ADDQ $%d, SI", blockBytes)
	g.a("ADDQ $512, BX")
	g.a("ADDQ $%d, R8", auxBytes)
	if mr > 4 {
		g.a("ADDQ $512, R12")
		g.a("ADDQ $%d, DI", auxBytes)
	}
	g.a("DECQ CX")
	g.a("JNE %s_block", name)
	for r := range mr {
		a0, a1 := r, 12+r%4
		if bias {
			g.a("VADDPS Z%d, Z%d, Z%d", 6+r, a0, a0)
		}
		g.a("VEXTRACTF64X4 $1, Z%d, Y%d", a0, a1)
		g.a("VADDPS Y%d, Y%d, Y%d", a1, a0, a0)
		g.a("VEXTRACTF128 $1, Y%d, X%d", a0, a1)
		g.a("VADDPS X%d, X%d, X%d", a1, a0, a0)
		g.a("VMOVHLPS X%d, X%d, X%d", a0, a0, a1)
		g.a("VADDPS X%d, X%d, X%d", a1, a0, a0)
		g.a("VMOVSHDUP X%d, X%d", a0, a1)
		g.a("VADDSS X%d, X%d, X%d", a1, a0, a0)
		g.vyoff(r)
		g.a("VMOVSS X%d, %s", a0, vyrow(r))
	}
	g.a("ADDQ $4, DX")
	g.a("DECQ R11")
	g.a("JNE %s_row", name)
	fmt.Fprintf(&g.s, "%s_done:\n", name)
	g.a("VZEROUPPER")
	g.a("RET")
}

// q6KVNNI emits the Q6_K kernel for mr rows of x: for each of n rows of w
// (blocks blocks each), y[r·ldy] = Σ x[r]·w, y advancing by one per row;
// aux is the rows' nsum (int32 per lane, rows ldx bytes apart).
func (g *gen) q6KVNNI(mr int) {
	name := fmt.Sprintf("q6KVNNI%d", mr)
	g.vnniPrologue(name, mr, 210, false, func() {
		g.a("VPBROADCASTD blocksb30<>(SB), Z30")
		g.a("VMOVDQU32 blocksperm6<>(SB), Z24")
	})
	g.a("VPBROADCASTW 208(SI), Y23")
	g.a("VCVTPH2PS Y23, Z23")
	g.a("VPMOVSXBD 192(SI), Z22")
	g.a("VCVTDQ2PS Z22, Z22")
	g.a("VMULPS Z23, Z22, Z22")
	g.a("VPERMPS Z22, Z24, Z18")
	for h := range 2 {
		g.a("VMOVDQU64 %d(SI), Z21", 64*h)
		g.a("VBROADCASTI64X4 %d(SI), Z20", 128+32*h)
		// qh, its upper copy shifted right by 2: bits 4, 5 are then chunk
		// 2h+1's, bits 0, 1 chunk 2h's (shifted left by 4).
		g.a("VPSRLW $2, Z20, K2, Z20")
		for u := range 2 {
			c := 2*h + u
			z := 25 + c
			// Codes: the nibbles | qh's two bits at bits 4, 5.
			nib := "Z21"
			if u == 0 {
				g.a("VPSLLW $4, Z20, Z%d", z)
				g.a("VPANDQ Z30, Z%d, Z%d", z, z)
			} else {
				g.a("VPANDQ Z30, Z20, Z%d", z)
				g.a("VPSRLW $4, Z21, Z17")
				nib = "Z17"
			}
			g.a("VPTERNLOGD $0xf8, Z31, %s, Z%d", nib, z) // codes | (nib & 0x0f)
		}
	}
	g.vnniTranspose()
	g.vnniRows(mr, true)
	g.vnniEpilogue(name, mr, 210, 64, false)
}

// q5KVNNI emits the Q5_K kernel for mr rows of x; aux is the rows' group
// sums of the rounded x, one float32 per 32 elements (vnniPrep's d·Σq, at
// the prepared rows' xsOff; rows ldx bytes apart).
//
// A block's chunk c (elements 64c..64c+63, sub-blocks 2c and 2c+1) is, byte
// for byte, the low then the high nibbles of qs[32c..32c+31] with bit 2c
// (bytes 0..31) or 2c+1 (bytes 32..63) of qh[l] as bit 4. The eight 6-bit
// scales and mins (ggml's get_scale_min_k4 packing in the 12 bytes of words
// u0, u1, u2) are unpacked in a vector register:
//
//	[sc0..3, m0..3] = [u0, u1] & 0x3f
//	[sc4..7, m4..7] = ([u2, u2>>4] & 0x0f) | ([u0, u1]>>2 & 0x30)
//
// and multiplied by d (sc) and dmin (m), exactly. The lanes' sums Σ q·x
// are scaled as Q6_K's; the mins give -Σ (dmin·m)·Σx per sub-block, the
// products added to a bias accumulator (lanes 0..7, one per sub-block) as
// d·Σq of x, so that the result is the rounded x times the weights; the
// row's result is the lanes of acc + bias summed in the tree.
//
// Registers (besides the common ones): Z6..Z11 row r's bias accumulator,
// Z16 bytes 0x10, Z20 qh, Z21 qs, Z22 d·sc ×8 then dmin·m ×8, Y23 dmin·m,
// Z24 VPERMPS indices (lane 4g+c → sub-block 2c + g/2), Z25..Z28 the
// codes as Q6_K's, Z29 the d/dmin lane map; K1 the fifth bits.
func (g *gen) q5KVNNI(mr int) {
	name := fmt.Sprintf("q5KVNNI%d", mr)
	g.vnniPrologue(name, mr, 176, true, func() {
		g.a("VPBROADCASTD blocksb10<>(SB), Z16")
		g.a("VMOVDQU32 blocksdm<>(SB), Z29")
		g.a("VMOVDQU32 blocksperm5<>(SB), Z24")
	})
	g.a("VMOVDQU32 4(SI), X17")
	g.a("VPANDD.BCST blocksb3f<>(SB), X17, X18")
	g.a("VPSHUFD $0xaa, X17, X19")
	g.a("VPSRLVD blocksshift5d<>(SB), X19, X19")
	g.a("VPANDD X31, X19, X19")
	g.a("VPSRLD $2, X17, X21")
	g.a("VPANDD.BCST blocksb30<>(SB), X21, X21")
	g.a("VPORD X21, X19, X19")
	g.a("VPUNPCKLDQ X19, X18, X18")
	g.a("VPMOVZXBD X18, Z22")
	g.a("VCVTDQ2PS Z22, Z22")
	g.a("VPBROADCASTD 0(SI), X21")
	g.a("VCVTPH2PS X21, X21")
	g.a("VPERMPS Z21, Z29, Z21")
	g.a("VMULPS Z21, Z22, Z22")
	g.a("VEXTRACTF64X4 $1, Z22, Y23")
	g.a("VBROADCASTI64X4 16(SI), Z20")
	for r := range mr {
		t := 12 + r%4
		g.a("VMULPS %s, Y23, Y%d", vrow(true, r, 0), t)
		g.a("VSUBPS Y%d, Y%d, Y%d", t, 6+r, 6+r)
	}
	g.a("VPERMPS Z22, Z24, Z18")
	for c := range 4 {
		z := 25 + c
		g.a("VBROADCASTI64X4 %d(SI), Z21", 48+32*c)
		g.a("VPSRLW $4, Z21, K2, Z21") // the upper copy's high nibbles
		g.a("VPANDQ Z31, Z21, Z%d", z)
		g.a("VPTESTMB blocksbit5<>+%d(SB), Z20, K1", 64*c)
		g.a("VPADDB Z16, Z%d, K1, Z%d", z, z)
	}
	g.vnniTranspose()
	g.vnniRows(mr, false)
	g.vnniEpilogue(name, mr, 176, 32, true)
}

// vnniData5 emits Q5_K's constant tables.
func (g *gen) vnniData5() {
	g.s.WriteString("\n// blocksperm5: lane L = 4g+c of the transposed chunks takes Q5_K sub-block 2c + g/2.\n")
	for l := range 16 {
		fmt.Fprintf(&g.s, "DATA blocksperm5<>+%d(SB)/4, $%d\n", 4*l, 2*(l%4)+l/8)
	}
	g.s.WriteString("GLOBL blocksperm5<>(SB), RODATA|NOPTR, $64\n")
	g.s.WriteString("\n// blocksbit5: chunk c's fifth bits, 1<<2c (32 bytes) then 1<<(2c+1).\n")
	for c := range 4 {
		for h := range 2 {
			fmt.Fprintf(&g.s, "DATA blocksbit5<>+%d(SB)/8, $%#x\n", 64*c+32*h, uint64(0x0101010101010101)<<(2*c+h))
			for q := 1; q < 4; q++ {
				fmt.Fprintf(&g.s, "DATA blocksbit5<>+%d(SB)/8, $%#x\n", 64*c+32*h+8*q, uint64(0x0101010101010101)<<(2*c+h))
			}
		}
	}
	g.s.WriteString("GLOBL blocksbit5<>(SB), RODATA|NOPTR, $256\n")
	g.s.WriteString("DATA blocksshift5d<>+0(SB)/4, $0\nDATA blocksshift5d<>+4(SB)/4, $4\nDATA blocksshift5d<>+8(SB)/4, $0\nDATA blocksshift5d<>+12(SB)/4, $0\nGLOBL blocksshift5d<>(SB), RODATA|NOPTR, $16\n")
	g.s.WriteString("DATA blocksb3f<>+0(SB)/4, $0x3f3f3f3f\nGLOBL blocksb3f<>(SB), RODATA|NOPTR, $4\n")
	g.s.WriteString("DATA blocksb10<>+0(SB)/4, $0x10101010\nGLOBL blocksb10<>(SB), RODATA|NOPTR, $4\n")
}
