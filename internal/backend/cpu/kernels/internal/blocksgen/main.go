// Command blocksgen writes the amd64 assembly of package kernels' ggml
// block decoders, blocks_amd64.s, and their Go declarations,
// blocks_decl_amd64.go.
//
// Run it with `go generate` in internal/backend/cpu/kernels. Each decoder
// turns n consecutive super-blocks of one format into float32 values with
// AVX-512, 16 values per instruction, and computes every value with the
// same float operations, in the same order, as package quant's reference
// (quant.DequantizeGGML): the integer code is exact in int32, converted to
// float32 exactly, then multiplied by the sub-block's float32 scale (and,
// for Q5_K, the min subtracted after the rounded product). So the values
// are the reference's bit for bit.
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

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

type gen struct {
	s bytes.Buffer // assembly
	g bytes.Buffer // Go declarations
}

func (g *gen) a(format string, args ...any) { fmt.Fprintf(&g.s, "\t"+format+"\n", args...) }

// decodeSig is the Go signature of every decoder: n blocks from blk to dst.
const decodeSig = "(dst *float32, blk *byte, n int)"

func (g *gen) text(name string, frame int) {
	fmt.Fprintf(&g.s, "\n// func %s%s\n", name, decodeSig)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, $%d-24\n", name, frame)
	fmt.Fprintf(&g.g, "//go:noescape\nfunc %s%s\n\n", name, decodeSig)
	g.a("MOVQ dst+0(FP), DI")
	g.a("MOVQ blk+8(FP), SI")
	g.a("MOVQ n+16(FP), CX")
	g.a("TESTQ CX, CX")
	g.a("JZ %s_done", name)
}

func (g *gen) loopEnd(name string, blockBytes, blockElems int) {
	g.a("ADDQ $%d, SI", blockBytes)
	g.a("ADDQ $%d, DI", 4*blockElems)
	g.a("DECQ CX")
	g.a("JNZ %s_loop", name)
	fmt.Fprintf(&g.s, "%s_done:\n", name)
	g.a("VZEROUPPER")
	g.a("RET")
}

// shiftTo moves bit from of every lane of src to bit to, in dst (other
// bits are garbage for a following mask).
func (g *gen) shiftTo(src, dst string, from, to int) {
	switch {
	case to > from:
		g.a("VPSLLD $%d, %s, %s", to-from, src, dst)
	case to < from:
		g.a("VPSRLD $%d, %s, %s", from-to, src, dst)
	default:
		g.a("VMOVDQA32 %s, %s", src, dst)
	}
}

// q6K: 210-byte blocks: ql[128], qh[64], int8 scales[16], f16 d. Element
// e = 128·h + 32·s + l has its low nibble in ql[64h + 32(s%2) + l] (high
// nibble for s ≥ 2) and bits 2s, 2s+1 of qh[32h + l] as bits 4, 5; the
// value is (d·scales[e/16])·float32(q-32).
//
// Registers: Z31 = 15, Z30 = 48, Z29 = 32 (int32 lanes); the 16 products
// d·scale of a block are stored at 0(SP) and broadcast from there.
func (g *gen) q6K() {
	const name = "decodeQ6K_avx512"
	g.text(name, 64)
	g.a("VPBROADCASTD blocks15<>(SB), Z31")
	g.a("VPBROADCASTD blocks48<>(SB), Z30")
	g.a("VPBROADCASTD blocks32<>(SB), Z29")
	fmt.Fprintf(&g.s, "%s_loop:\n", name)
	g.a("MOVWLZX 208(SI), AX")
	g.a("VMOVD AX, X0")
	g.a("VCVTPH2PS X0, X0")
	g.a("VBROADCASTSS X0, Z28")
	g.a("VPMOVSXBD 192(SI), Z27")
	g.a("VCVTDQ2PS Z27, Z27")
	g.a("VMULPS Z27, Z28, Z27")
	g.a("VMOVUPS Z27, 0(SP)")
	for h := range 2 {
		for half := range 2 {
			l0 := 16 * half
			g.a("VPMOVZXBD %d(SI), Z0", 64*h+l0)     // a = ql[l]
			g.a("VPMOVZXBD %d(SI), Z1", 64*h+32+l0)  // c = ql[l+32]
			g.a("VPMOVZXBD %d(SI), Z2", 128+32*h+l0) // qh[l]
			// s = 0: a&15 | bits 0,1 of qh; s = 1: c&15 | bits 2,3;
			// s = 2: a>>4 | bits 4,5; s = 3: c>>4 | bits 6,7.
			for s := range 4 {
				src := "Z0"
				if s%2 == 1 {
					src = "Z1"
				}
				if s < 2 {
					g.a("VPANDD Z31, %s, Z3", src)
				} else {
					g.a("VPSRLD $4, %s, Z3", src)
				}
				g.shiftTo("Z2", "Z4", 2*s, 4)
				g.a("VPANDD Z30, Z4, Z4")
				g.a("VPORD Z4, Z3, Z3")
				g.a("VPSUBD Z29, Z3, Z3")
				g.a("VCVTDQ2PS Z3, Z3")
				sub := 8*h + 2*s + half // (128h + 32s + l0)/16
				g.a("VMULPS.BCST %d(SP), Z3, Z3", 4*sub)
				g.a("VMOVUPS Z3, %d(DI)", 4*(128*h+32*s+l0))
			}
		}
	}
	g.loopEnd(name, 210, 256)
}

// q5K: 176-byte blocks: f16 d, dmin; scales[12] (ggml's get_scale_min_k4
// packing of eight 6-bit scales and mins); qh[32]; qs[128]. Element
// e = 64c + 32u + l has its low nibble in qs[32c + l] (high nibble when
// u = 1) and its fifth bit at bit 2c+u of qh[l]; the value is
// float32((d·sc)·float32(q)) - dmin·m for sub-block e/32.
//
// The scales are unpacked four at a time in general registers:
//
//	sc[0..3] = u0 & 0x3f3f3f3f          m[0..3] = u1 & 0x3f3f3f3f
//	sc[4..7] = u2&0x0f0f0f0f | (u0>>6&0x03030303)<<4
//	m[4..7]  = u2>>4&0x0f0f0f0f | (u1>>6&0x03030303)<<4
//
// for the little-endian words u0, u1, u2 of the 12 bytes, stored as bytes
// sc[0..7], m[0..7] at 64(SP), widened and converted to floats and
// multiplied by d (eight lanes) and dmin (eight lanes): 0(SP) then holds
// the eight scales d·sc followed by the eight mins dmin·m.
//
// Registers: Z31 = 15, Z30 = 16, Z29 = the lane map 0×8, 1×8.
func (g *gen) q5K() {
	const name = "decodeQ5K_avx512"
	g.text(name, 80)
	g.a("VPBROADCASTD blocks15<>(SB), Z31")
	g.a("VPBROADCASTD blocks16<>(SB), Z30")
	g.a("VMOVDQU32 blocksdm<>(SB), Z29")
	fmt.Fprintf(&g.s, "%s_loop:\n", name)
	g.a("MOVL 4(SI), AX")  // u0
	g.a("MOVL 8(SI), BX")  // u1
	g.a("MOVL 12(SI), DX") // u2
	g.a("MOVL AX, R8")
	g.a("ANDL $0x3f3f3f3f, R8")
	g.a("MOVL R8, 64(SP)") // sc[0..3]
	g.a("MOVL BX, R8")
	g.a("ANDL $0x3f3f3f3f, R8")
	g.a("MOVL R8, 72(SP)") // m[0..3]
	g.a("MOVL DX, R8")
	g.a("ANDL $0x0f0f0f0f, R8")
	g.a("SHRL $6, AX")
	g.a("ANDL $0x03030303, AX")
	g.a("SHLL $4, AX")
	g.a("ORL AX, R8")
	g.a("MOVL R8, 68(SP)") // sc[4..7]
	g.a("SHRL $4, DX")
	g.a("ANDL $0x0f0f0f0f, DX")
	g.a("SHRL $6, BX")
	g.a("ANDL $0x03030303, BX")
	g.a("SHLL $4, BX")
	g.a("ORL BX, DX")
	g.a("MOVL DX, 76(SP)") // m[4..7]
	g.a("MOVL 0(SI), AX")  // d, dmin
	g.a("VMOVD AX, X0")
	g.a("VCVTPH2PS X0, X0")
	g.a("VPERMPS Z0, Z29, Z28")
	g.a("VPMOVZXBD 64(SP), Z27")
	g.a("VCVTDQ2PS Z27, Z27")
	g.a("VMULPS Z27, Z28, Z27")
	g.a("VMOVUPS Z27, 0(SP)")
	for c := range 4 {
		for half := range 2 {
			l0 := 16 * half
			g.a("VPMOVZXBD %d(SI), Z0", 48+32*c+l0) // qs
			g.a("VPMOVZXBD %d(SI), Z1", 16+l0)      // qh
			for u := range 2 {
				if u == 0 {
					g.a("VPANDD Z31, Z0, Z3")
				} else {
					g.a("VPSRLD $4, Z0, Z3")
				}
				g.shiftTo("Z1", "Z4", 2*c+u, 4)
				g.a("VPANDD Z30, Z4, Z4")
				g.a("VPORD Z4, Z3, Z3")
				g.a("VCVTDQ2PS Z3, Z3")
				sub := 2*c + u
				g.a("VMULPS.BCST %d(SP), Z3, Z3", 4*sub)
				g.a("VSUBPS.BCST %d(SP), Z3, Z3", 4*(8+sub))
				g.a("VMOVUPS Z3, %d(DI)", 4*(64*c+32*u+l0))
			}
		}
	}
	g.loopEnd(name, 176, 256)
}

// q5_0: 22-byte blocks: f16 d, qh (32 bits, little-endian), qs[16].
// Element j < 16 has the low nibble of qs[j] and bit j of qh as bit 4,
// element j+16 the high nibble and bit j+16; the value is
// float32(q-16)·d.
//
// Registers: Z31 = 15, Z30 = 16, Z29 = 0, 1, …, 15 (the shifts of qh's
// bits for the low half; the high half shifts by 16 more first).
func (g *gen) q5_0() {
	const name = "decodeQ5_0_avx512"
	g.text(name, 0)
	g.a("VPBROADCASTD blocks15<>(SB), Z31")
	g.a("VPBROADCASTD blocks16<>(SB), Z30")
	g.a("VMOVDQU32 blocksiota<>(SB), Z29")
	fmt.Fprintf(&g.s, "%s_loop:\n", name)
	g.a("MOVWLZX 0(SI), AX")
	g.a("VMOVD AX, X0")
	g.a("VCVTPH2PS X0, X0")
	g.a("VBROADCASTSS X0, Z28")
	g.a("VPBROADCASTD 2(SI), Z1") // qh
	g.a("VPMOVZXBD 6(SI), Z0")    // qs
	for u := range 2 {
		if u == 0 {
			g.a("VPANDD Z31, Z0, Z3")
			g.a("VPSRLVD Z29, Z1, Z4")
		} else {
			g.a("VPSRLD $4, Z0, Z3")
			g.a("VPSRLD $16, Z1, Z4")
			g.a("VPSRLVD Z29, Z4, Z4")
		}
		g.a("VPSLLD $4, Z4, Z4")
		g.a("VPANDD Z30, Z4, Z4")
		g.a("VPORD Z4, Z3, Z3")
		g.a("VPSUBD Z30, Z3, Z3")
		g.a("VCVTDQ2PS Z3, Z3")
		g.a("VMULPS Z28, Z3, Z3")
		g.a("VMOVUPS Z3, %d(DI)", 64*u)
	}
	g.loopEnd(name, 22, 32)
}

// iq4: IQ4_NL (18-byte blocks: f16 d, qs[16]) and IQ4_XS (136-byte
// blocks: f16 d, scales_h (16 bits), scales_l[4], qs[128]). A group of 32
// elements has element j < 16 at the low nibble of qs[j], j+16 at the high
// one; code q's value is dl·float32(KValuesIQ4NL[q]), looked up from the
// float table blocksiq4 (VPERMPS), with dl = d for IQ4_NL and, for IQ4_XS's
// sub-block s, d·float32(ls-32), ls the 6-bit scale: nibble s of scales_l
// (low nibbles first) and bits 2s, 2s+1 of scales_h as bits 4, 5. The
// eight ls-32 go to 0(SP) as int32, the eight dl to 32(SP).
//
// Registers: Z31 = 15, Z30 = the table.
func (g *gen) iq4(xs bool) {
	name, frame, bb, be := "decodeIQ4NL_avx512", 0, 18, 32
	if xs {
		name, frame, bb, be = "decodeIQ4XS_avx512", 64, 136, 256
	}
	g.text(name, frame)
	g.a("VPBROADCASTD blocks15<>(SB), Z31")
	g.a("VMOVUPS blocksiq4<>(SB), Z30")
	fmt.Fprintf(&g.s, "%s_loop:\n", name)
	g.a("MOVWLZX 0(SI), AX")
	g.a("VMOVD AX, X0")
	g.a("VCVTPH2PS X0, X0")
	groups, qs := 1, 2
	if xs {
		groups, qs = 8, 8
		g.a("MOVWLZX 2(SI), DX") // scales_h
		for sb := range 8 {
			g.a("MOVBLZX %d(SI), AX", 4+sb/2)
			if sb%2 == 1 {
				g.a("SHRL $4, AX")
			}
			g.a("ANDL $15, AX")
			g.a("MOVL DX, BX")
			if sb > 0 {
				g.a("SHRL $%d, BX", 2*sb)
			}
			g.a("ANDL $3, BX")
			g.a("SHLL $4, BX")
			g.a("ORL BX, AX")
			g.a("SUBL $32, AX")
			g.a("MOVL AX, %d(SP)", 4*sb)
		}
		g.a("VBROADCASTSS X0, Y1")
		g.a("VCVTDQ2PS 0(SP), Y2")
		g.a("VMULPS Y2, Y1, Y2")
		g.a("VMOVUPS Y2, 32(SP)")
	} else {
		g.a("VBROADCASTSS X0, Z28")
	}
	for sb := range groups {
		g.a("VPMOVZXBD %d(SI), Z0", qs+16*sb)
		for u := range 2 {
			if u == 0 {
				g.a("VPANDD Z31, Z0, Z3")
			} else {
				g.a("VPSRLD $4, Z0, Z3")
			}
			g.a("VPERMPS Z30, Z3, Z3")
			if xs {
				g.a("VMULPS.BCST %d(SP), Z3, Z3", 32+4*sb)
			} else {
				g.a("VMULPS Z28, Z3, Z3")
			}
			g.a("VMOVUPS Z3, %d(DI)", 4*(32*sb+16*u))
		}
	}
	g.loopEnd(name, bb, be)
}

func main() {
	dir := flag.String("dir", ".", "output directory (internal/backend/cpu/kernels)")
	flag.Parse()
	g := &gen{}
	g.s.WriteString("// Code generated by internal/blocksgen; DO NOT EDIT.\n\n//go:build amd64 && !noasm\n\n#include \"textflag.h\"\n\n")
	for _, v := range []int{15, 16, 32, 48} {
		fmt.Fprintf(&g.s, "DATA blocks%d<>+0(SB)/4, $%d\nGLOBL blocks%d<>(SB), RODATA|NOPTR, $4\n", v, v, v)
	}
	g.s.WriteString("\n// blocksdm maps lanes 0..7 to lane 0 (d) and 8..15 to lane 1 (dmin).\n")
	for i := range 16 {
		fmt.Fprintf(&g.s, "DATA blocksdm<>+%d(SB)/4, $%d\n", 4*i, i/8)
	}
	g.s.WriteString("GLOBL blocksdm<>(SB), RODATA|NOPTR, $64\n")
	g.s.WriteString("\n// blocksiota holds 0, 1, …, 15 as int32.\n")
	for i := range 16 {
		fmt.Fprintf(&g.s, "DATA blocksiota<>+%d(SB)/4, $%d\n", 4*i, i)
	}
	g.s.WriteString("GLOBL blocksiota<>(SB), RODATA|NOPTR, $64\n")
	g.s.WriteString("\n// blocksiq4 holds IQ4_NL's levels (quant.KValuesIQ4NL) as float32.\n")
	for i, k := range quant.KValuesIQ4NL {
		fmt.Fprintf(&g.s, "DATA blocksiq4<>+%d(SB)/4, $%#x\n", 4*i, math.Float32bits(float32(k)))
	}
	g.s.WriteString("GLOBL blocksiq4<>(SB), RODATA|NOPTR, $64\n")
	g.vnniData()
	g.vnniData5()
	g.g.WriteString("// Code generated by internal/blocksgen; DO NOT EDIT.\n\n//go:build amd64 && !noasm\n\npackage kernels\n\n")
	g.q6K()
	g.q5K()
	g.q5_0()
	g.iq4(false)
	g.iq4(true)
	for mr := 1; mr <= vnniMaxRows; mr++ {
		g.q6KVNNI(mr)
		g.q5KVNNI(mr)
	}
	src, err := format.Source(g.g.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "blocks_amd64.s"), g.s.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "blocks_decl_amd64.go"), src, 0o644); err != nil {
		log.Fatal(err)
	}
}
