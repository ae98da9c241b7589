package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

func quantizedRows(t testing.TB, r *rand.Rand, typ quant.GGML, n, k int) ([]byte, []float32) {
	v := make([]float32, n*k)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	data, err := quant.QuantizeGGML(typ, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := quant.DequantizeGGML(typ, v, data); err != nil {
		t.Fatal(err)
	}
	return data, v
}

// MatMulBlocks gives MatMulF32's bits over the dequantized rows, for
// every format, row counts that do and do not fill its decoding steps, and
// a column block of a wider output.
//
// It runs under every Set this CPU has (one row of x takes the hot tiles
// of the active set), with the VNNI products off: the float path is what
// machines without AVX-512 VNNI run (TestMatMulBlocksVNNI checks the
// other).
func TestMatMulBlocks(t *testing.T) {
	saved, savedVNNI := active, blocksVNNI
	defer func() { active, blocksVNNI = saved, savedVNNI }()
	blocksVNNI = false
	for _, set := range Sets() {
		active = set
		t.Run(set.Name, testMatMulBlocks)
	}
}

func testMatMulBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 4))
	for _, typ := range quant.GGMLFormats() {
		for _, sz := range [][3]int{{1, 256, 1}, {3, 512, 19}, {6, 2048, 9}, {2, 4352, 5}, {1, 2048, 13}, {1, 4352, 6}} {
			m, k, n := sz[0], sz[1], sz[2]
			data, dense := quantizedRows(t, r, typ, n, k)
			x := make([]float32, m*k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			const ldy, col = 40, 7 // the rows land at columns col.. of a wider y
			got, want := make([]float32, m*ldy), make([]float32, m*ldy)
			MatMulBlocks(got[col:], ldy, x, m, data, typ, k, make([]float32, BlockRows(k)*k))
			MatMulF32(want[col:], ldy, x, m, dense)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v m=%d k=%d n=%d: y[%d] = %v, MatMulF32 over the dequantized rows %v", typ, m, k, n, i, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkMatMulBlocks: one token's product with a TinyLlama-sized
// [2048, 2048] weight per format, single-threaded, against f16. The
// bytes per element are each format's own; GB/s-cpu divides them by the
// process's CPU time, not the wall clock (a shared machine).
func BenchmarkMatMulBlocks(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const n, k = 2048, 2048
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, n)
	for _, typ := range []quant.GGML{quant.Q4_1, quant.Q5_0, quant.Q5_K, quant.Q6_K, quant.Q3_K, quant.IQ4_XS} {
		data, _ := quantizedRows(b, r, typ, n, k)
		scratch := make([]float32, BlockRows(k)*k)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			c := startCPU(b, 1)
			for b.Loop() {
				MatMulBlocks(y, n, x, 1, data, typ, k, scratch)
			}
			c.report(float64(len(data)), "GB/s")
		})
	}
	w := make([]uint16, n*k)
	b.Run(fmt.Sprint("F16"), func(b *testing.B) {
		b.SetBytes(int64(2 * len(w)))
		c := startCPU(b, 1)
		for b.Loop() {
			MatMulF16(y, n, x, 1, w)
		}
		c.report(float64(2*len(w)), "GB/s")
	})
}

// BenchmarkMatMulBlocksOutput: one token's product with a [32000, 2048]
// output-layer-sized weight (too big for the caches: the weights stream
// from memory), Q6_K (random blocks with finite scales; the values do not
// change the work) against f16 (random finite halves).
func BenchmarkMatMulBlocksOutput(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 3))
	const n, k = 32000, 2048
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, n)
	for _, typ := range []quant.GGML{quant.Q6_K} {
		data := randomBlocks(r, typ, n*k/typ.BlockElems())
		scratch := make([]float32, BlockRows(k)*k)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			c := startCPU(b, 1)
			for b.Loop() {
				MatMulBlocks(y, n, x, 1, data, typ, k, scratch)
			}
			c.report(float64(len(data)), "GB/s")
		})
	}
	w := make([]uint16, n*k)
	for i := range w {
		w[i] = randomF16(r)
	}
	b.Run("F16", func(b *testing.B) {
		b.SetBytes(int64(2 * len(w)))
		c := startCPU(b, 1)
		for b.Loop() {
			MatMulF16(y, n, x, 1, w)
		}
		c.report(float64(2*len(w)), "GB/s")
	})
}

// randomF16 is a random finite f16 (no NaN or Inf), often an extreme one:
// zero, negative zero, the largest, the smallest subnormal.
func randomF16(r *rand.Rand) uint16 {
	switch r.IntN(8) {
	case 0:
		return []uint16{0, 0x8000, 0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff}[r.IntN(7)]
	}
	for {
		h := uint16(r.Uint32())
		if h&0x7c00 != 0x7c00 {
			return h
		}
	}
}

// blockScaleOffsets are the byte offsets of each format's f16 scales in
// its block.
var blockScaleOffsets = map[quant.GGML][]int{quant.Q6_K: {208}, quant.Q5_K: {0, 2}, quant.Q5_0: {0}, quant.IQ4_NL: {0}, quant.IQ4_XS: {0}}

// randomBlocks is n blocks of random bytes but for random finite f16
// scales (randomF16).
func randomBlocks(r *rand.Rand, typ quant.GGML, n int) []byte {
	src := make([]byte, n*typ.BlockBytes())
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for b := range n {
		for _, off := range blockScaleOffsets[typ] {
			h := randomF16(r)
			src[b*typ.BlockBytes()+off], src[b*typ.BlockBytes()+off+1] = byte(h), byte(h>>8)
		}
	}
	return src
}

// The block decoders (generated assembly where the CPU has it) give
// quant.DequantizeGGML's bits on blocks of random bytes with random finite
// f16 scales, for runs of blocks of several lengths; every value is
// written (dst starts as NaN).
func TestDecodeBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 5))
	for _, typ := range []quant.GGML{quant.Q5_0, quant.Q5_K, quant.Q6_K, quant.IQ4_NL, quant.IQ4_XS} {
		fast := false
		for _, n := range []int{1, 2, 7, 64} {
			for range 20 {
				src := randomBlocks(r, typ, n)
				want := make([]float32, n*typ.BlockElems())
				if err := quant.DequantizeGGML(typ, want, src); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, len(want))
				for i := range got {
					got[i] = float32(math.NaN())
				}
				fast = decodeBlocksFast(typ, got, src)
				if !fast {
					decodeBlocks(typ, got, src)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v, %d blocks: value %d = %v (%#x), reference %v (%#x)", typ, n, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
		t.Logf("%v: generated decoder: %v", typ, fast)
	}
}

// BenchmarkDecodeBlocks: decoding 8192 values (MatMulBlocks' scratch for
// k = 2048) held in L1, per format with a generated decoder.
func BenchmarkDecodeBlocks(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 4))
	dst := make([]float32, 8192)
	for _, typ := range []quant.GGML{quant.Q5_0, quant.Q5_K, quant.Q6_K, quant.IQ4_NL, quant.IQ4_XS} {
		src := randomBlocks(r, typ, len(dst)/typ.BlockElems())
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(dst)))
			for b.Loop() {
				decodeBlocks(typ, dst, src)
			}
		})
	}
}

// BenchmarkMatMulBlocksVerify: BenchmarkMatMulBlocks' product for a
// verification pass of 5 tokens (ReDrafter's beam length 5), Q6_K and
// Q5_K against f16.
func BenchmarkMatMulBlocksVerify(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 4))
	const m, n, k = 5, 2048, 2048
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, m*n)
	// ffn_down's shape: rows of 5632.
	const kd = 5632
	xd := make([]float32, m*kd)
	for i := range xd {
		xd[i] = float32(r.NormFloat64())
	}
	for _, typ := range []quant.GGML{quant.Q6_K} {
		data, _ := quantizedRows(b, r, typ, 2048, kd)
		scratch := make([]float32, BlockRows(kd)*kd)
		b.Run(typ.String()+"-k5632", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			c := startCPU(b, 1)
			for b.Loop() {
				MatMulBlocks(y, n, xd, m, data, typ, kd, scratch)
			}
			c.report(float64(len(data)), "GB/s")
		})
	}
	for _, typ := range []quant.GGML{quant.Q5_K, quant.Q6_K} {
		data, _ := quantizedRows(b, r, typ, n, k)
		scratch := make([]float32, BlockRows(k)*k)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			c := startCPU(b, 1)
			for b.Loop() {
				MatMulBlocks(y, n, x, m, data, typ, k, scratch)
			}
			c.report(float64(len(data)), "GB/s")
		})
	}
	w := make([]uint16, n*k)
	b.Run("F16", func(b *testing.B) {
		b.SetBytes(int64(2 * len(w)))
		c := startCPU(b, 1)
		for b.Loop() {
			MatMulF16(y, n, x, m, w)
		}
		c.report(float64(2*len(w)), "GB/s")
	})
}
