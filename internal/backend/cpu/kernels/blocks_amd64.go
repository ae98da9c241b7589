//go:build amd64 && !noasm

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// blocksAVX512 reports whether the generated block decoders
// (internal/blocksgen) run on this CPU.
var blocksAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasF16C

// decodeBlocksFast decodes the blocks in src into dst with a generated
// decoder, bit for bit quant.DequantizeGGML's values, and reports whether
// it did: false when t has no decoder here or the CPU lacks AVX-512.
// dst holds exactly the elements of src's whole blocks.
func decodeBlocksFast(t quant.GGML, dst []float32, src []byte) bool {
	if !blocksAVX512 || len(src) == 0 {
		return false
	}
	n := len(src) / t.BlockBytes()
	switch t {
	case quant.Q6_K:
		decodeQ6K_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.Q5_K:
		decodeQ5K_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.Q5_0:
		decodeQ5_0_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.IQ4_NL:
		decodeIQ4NL_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.IQ4_XS:
		decodeIQ4XS_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	default:
		return false
	}
	return true
}
