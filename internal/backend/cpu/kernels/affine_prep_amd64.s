//go:build amd64 && !noasm

#include "textflag.h"

// Quantization of x for the VNNI affine kernels (see prepareVNNI): each
// block of 32 float32s becomes 32 int8s q = round(x·127/max|x|) (nearest
// even, as VCVTPS2DQ rounds) with the float scale d = max|x|/127, written
// in the chunk layout of internal/affinegen, plus the block's sum d·Σq.

DATA vnnievens<>+0(SB)/4, $0
DATA vnnievens<>+4(SB)/4, $2
DATA vnnievens<>+8(SB)/4, $4
DATA vnnievens<>+12(SB)/4, $6
DATA vnnievens<>+16(SB)/4, $8
DATA vnnievens<>+20(SB)/4, $10
DATA vnnievens<>+24(SB)/4, $12
DATA vnnievens<>+28(SB)/4, $14
DATA vnnievens<>+32(SB)/4, $16
DATA vnnievens<>+36(SB)/4, $18
DATA vnnievens<>+40(SB)/4, $20
DATA vnnievens<>+44(SB)/4, $22
DATA vnnievens<>+48(SB)/4, $24
DATA vnnievens<>+52(SB)/4, $26
DATA vnnievens<>+56(SB)/4, $28
DATA vnnievens<>+60(SB)/4, $30
GLOBL vnnievens<>(SB), RODATA|NOPTR, $64

DATA vnniodds<>+0(SB)/4, $1
DATA vnniodds<>+4(SB)/4, $3
DATA vnniodds<>+8(SB)/4, $5
DATA vnniodds<>+12(SB)/4, $7
DATA vnniodds<>+16(SB)/4, $9
DATA vnniodds<>+20(SB)/4, $11
DATA vnniodds<>+24(SB)/4, $13
DATA vnniodds<>+28(SB)/4, $15
DATA vnniodds<>+32(SB)/4, $17
DATA vnniodds<>+36(SB)/4, $19
DATA vnniodds<>+40(SB)/4, $21
DATA vnniodds<>+44(SB)/4, $23
DATA vnniodds<>+48(SB)/4, $25
DATA vnniodds<>+52(SB)/4, $27
DATA vnniodds<>+56(SB)/4, $29
DATA vnniodds<>+60(SB)/4, $31
GLOBL vnniodds<>(SB), RODATA|NOPTR, $64

DATA vnniconst<>+0(SB)/4, $0x7fffffff // abs mask
DATA vnniconst<>+4(SB)/4, $0x42fe0000 // 127
DATA vnniconst<>+8(SB)/4, $0x3c010204 // 1/127
DATA vnniconst<>+12(SB)/4, $0x00800000 // smallest normal float32
GLOBL vnniconst<>(SB), RODATA|NOPTR, $16

// func vnniPrep(x *float32, blocks int, out *byte, bits int, sums *float32)
TEXT ·vnniPrep(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ out+16(FP), DI
	MOVQ bits+24(FP), R8
	MOVQ sums+32(FP), R9
	VMOVDQU32 vnnievens<>(SB), Z20
	VMOVDQU32 vnniodds<>(SB), Z21
	VBROADCASTSS vnniconst<>+0(SB), Z22
	VMOVSS vnniconst<>+4(SB), X23
	VMOVSS vnniconst<>+8(SB), X24
	VMOVSS vnniconst<>+12(SB), X25
	XORQ BX, BX

loop:
	TESTQ CX, CX
	JEQ   done
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1

	// max|x| and the scales d = max/127, 127/max.
	VANDPS        Z22, Z0, Z3
	VANDPS        Z22, Z1, Z4
	VMAXPS        Z4, Z3, Z3
	VEXTRACTF64X4 $1, Z3, Y4
	VMAXPS        Y4, Y3, Y3
	VEXTRACTF128  $1, Y3, X4
	VMAXPS        X4, X3, X3
	VMOVHLPS      X3, X3, X4
	VMAXPS        X4, X3, X3
	VMOVSHDUP     X3, X4
	VMAXSS        X4, X3, X3
	VMULSS        X24, X3, X5
	VMAXSS        X25, X3, X3
	VDIVSS        X3, X23, X6
	VBROADCASTSS  X6, Z6
	VMULPS        Z6, Z0, Z0
	VMULPS        Z6, Z1, Z1
	VCVTPS2DQ     Z0, Z0
	VCVTPS2DQ     Z1, Z1

	// The block's sum as the kernels multiply it, d·Σq (not Σx): the
	// biases' term b·Σx then pairs with the same rounded x as the codes'
	// term s·Σq·x, and the product is exactly x's rounding times the
	// weights. With Σx, the rounding error of x would be multiplied by
	// the codes s·q (up to 2^bits steps) instead of the weights s·q+b. The
	// integer sum (at most 32·127) and its float partial sums are exact.
	VPADDD        Z1, Z0, Z2
	VCVTDQ2PS     Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VADDPS        Y3, Y2, Y2
	VEXTRACTF128  $1, Y2, X3
	VADDPS        X3, X2, X2
	VMOVHLPS      X2, X2, X3
	VADDPS        X3, X2, X2
	VMOVSHDUP     X2, X3
	VADDSS        X3, X2, X2
	VMULSS        X5, X2, X2
	VMOVSS        X2, (R9)(BX*4)

	CMPQ R8, $4
	JNE  eight

	// 4 bits: chunk BX/4 at 192·(BX/4); block BX%4 of it at 16·(BX%4):
	// evens at +0, odds at +64, four lane scales at +128.
	MOVQ    BX, AX
	SHRQ    $2, AX
	IMUL3Q  $192, AX, AX
	LEAQ    (DI)(AX*1), R10
	MOVQ    BX, DX
	ANDQ    $3, DX
	SHLQ    $4, DX
	VMOVDQA32 Z0, Z7
	VPERMT2D  Z1, Z20, Z7
	VMOVDQA32 Z0, Z8
	VPERMT2D  Z1, Z21, Z8
	VPMOVSDB  Z7, X7
	VPMOVSDB  Z8, X8
	VMOVDQU   X7, (R10)(DX*1)
	VMOVDQU   X8, 64(R10)(DX*1)
	VBROADCASTSS X5, X9
	VMOVUPS   X9, 128(R10)(DX*1)
	JMP       next

eight:
	// 8 bits: chunk BX/2 at 128·(BX/2); block BX%2 at 32·(BX%2), its
	// eight lane scales at +64.
	MOVQ    BX, AX
	SHRQ    $1, AX
	SHLQ    $7, AX
	LEAQ    (DI)(AX*1), R10
	MOVQ    BX, DX
	ANDQ    $1, DX
	SHLQ    $5, DX
	VPMOVSDB Z0, X7
	VPMOVSDB Z1, X8
	VMOVDQU  X7, (R10)(DX*1)
	VMOVDQU  X8, 16(R10)(DX*1)
	VBROADCASTSS X5, Y9
	VMOVUPS  Y9, 64(R10)(DX*1)

next:
	ADDQ $128, SI
	INCQ BX
	DECQ CX
	JMP  loop

done:
	VZEROUPPER
	RET
