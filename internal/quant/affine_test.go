package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Element j of a word sits at bits 4j, least significant first (MLX's
// layout): coordinate-coded codes read back in place.
func TestPackAffineLayout(t *testing.T) {
	codes := []uint8{1, 2, 3, 4, 5, 6, 7, 8, 15, 14, 13, 12, 11, 10, 9, 0}
	got := PackAffine(codes, 4)
	if want := []uint32{0x87654321, 0x09abcdef}; !slices.Equal(got, want) {
		t.Fatalf("PackAffine 4-bit = %#x, want %#x", got, want)
	}
	// On a little-endian machine byte i holds elements 2i (low nibble) and 2i+1.
	b := binary.LittleEndian.AppendUint32(nil, got[0])
	if b[0] != 0x21 || b[3] != 0x87 {
		t.Fatalf("bytes %x", b)
	}
	if got := PackAffine([]uint8{0x11, 0x22, 0x33, 0xff}, 8); got[0] != 0xff332211 {
		t.Fatalf("PackAffine 8-bit = %#x", got[0])
	}
	for _, bits := range []int{2, 4, 8} {
		r := rand.New(rand.NewPCG(uint64(bits), 1))
		c := make([]uint8, 64)
		for i := range c {
			c[i] = uint8(r.IntN(1 << bits))
		}
		p := PackAffine(c, bits)
		if u := UnpackAffine(p, bits); !slices.Equal(u, c) {
			t.Fatalf("%d bits: unpack(pack(c)) = %v, want %v", bits, u, c)
		}
		for i := range c {
			if AffineCodeAt(p, i, bits) != uint32(c[i]) {
				t.Fatalf("%d bits: AffineCodeAt(%d)", bits, i)
			}
		}
	}
}

// MLX's parameter choice: the edge of larger magnitude lands on the grid,
// so 0 is exact whenever the range spans it.
func TestAffineParams(t *testing.T) {
	cases := []struct {
		group      []float32
		bits       int
		scale, bia float32
	}{
		{[]float32{0, 1.5}, 4, -0.1, 1.5},      // max is the edge: s = -(1.5/15), q0 = -15
		{[]float32{-3, 0, 1}, 4, 3.0 / 11, -3}, // min is the edge: s = 4/15, q0 = round(-11.25), s = -3/-11
		{[]float32{0, 0, 0}, 4, -1e-7, 0},      // flat group: eps scale, q0 = 0
		{[]float32{2, 2}, 8, -1e-7, 2},         // flat away from 0: the value itself is the bias
	}
	for _, c := range cases {
		s, b := AffineParams(c.group, c.bits)
		// The scale is recomputed as edge/q0, so compare within a rounding.
		if math.Abs(float64(s-c.scale)) > 1e-6*math.Abs(float64(c.scale)) || b != c.bia {
			t.Errorf("AffineParams(%v, %d) = %g, %g; want %g, %g", c.group, c.bits, s, b, c.scale, c.bia)
		}
		for _, v := range c.group {
			if v == 0 {
				if q := AffineCode(0, s, b, c.bits); float32(s*float32(q))+b != 0 {
					t.Errorf("AffineParams(%v): 0 is not exact (code %d)", c.group, q)
				}
			}
		}
	}
}

// Quantizing reproduces every value within half a step, except at the end
// of the range opposite the edge: moving the edge onto the grid can shrink
// the step by up to a sixteenth (|edge/s| ≥ 7.5 rounds to at most +0.5),
// so the far end may clip by up to 15·s/16. 1.5 steps bounds both.
func TestQuantizeAffineError(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			rows, cols := 5, 256
			w := make([]float32, rows*cols)
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			w[7] = 0
			p, s, b, err := QuantizeAffine(w, cols, bits, gs)
			if err != nil {
				t.Fatal(err)
			}
			if len(p) != rows*cols*bits/32 || len(s) != rows*cols/gs {
				t.Fatalf("shapes: %d words, %d scales", len(p), len(s))
			}
			got := make([]float32, len(w))
			DequantizeAffine(got, p, s, b, bits, gs)
			for i := range w {
				step := math.Abs(float64(s[i/gs]))
				if e := math.Abs(float64(got[i] - w[i])); e > 1.5*step*(1+1e-5)+1e-6 {
					t.Fatalf("%d bits g%d: element %d: %g -> %g (step %g)", bits, gs, i, w[i], got[i], step)
				}
			}
			if got[7] != 0 {
				t.Errorf("%d bits g%d: exact zero came back as %g", bits, gs, got[7])
			}
		}
	}
	if _, _, _, err := QuantizeAffine(make([]float32, 96), 96, 4, 64); err == nil {
		t.Error("96 columns in groups of 64 accepted")
	}
	if _, _, _, err := QuantizeAffine(make([]float32, 64), 64, 3, 64); err == nil {
		t.Error("3 bits accepted")
	}
}

// The affine forms of Q4_0, Q8_0 and Q4_K blocks dequantize to ggml's own
// values.
func TestGGMLToAffineExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// 2^21 elements: 2^16 blocks or more, converted by several goroutines.
	for _, c := range []struct {
		typ GGML
		n   int
	}{{Q4_0, 512}, {Q8_0, 512}, {Q4_K, 512}, {Q4_0, 1 << 21}, {Q4_K, 1 << 23}} {
		typ, n := c.typ, c.n
		data := make([]byte, n/typ.BlockElems()*typ.BlockBytes())
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		// Keep the f16 fields finite and of ordinary magnitude.
		bb := typ.BlockBytes()
		for off := 0; off < len(data); off += bb {
			for _, at := range []int{0, 2} {
				if typ != Q4_K && at == 2 {
					continue
				}
				binary.LittleEndian.PutUint16(data[off+at:], F32ToF16(float32(r.NormFloat64()*0.01)))
			}
		}
		want := make([]float32, n)
		if err := DequantizeGGML(typ, want, data); err != nil {
			t.Fatal(err)
		}
		a, err := GGMLToAffine(typ, n, data)
		if err != nil {
			t.Fatal(err)
		}
		if typ != Q4_K && !a.F16 {
			t.Errorf("%v: scales not exact in f16", typ)
		}
		// The packed words are the codes element by element (ggml's layout
		// as ggml-common.h writes it), packed by PackAffine.
		codes := make([]uint8, n)
		for i := range n {
			blk := data[i/typ.BlockElems()*bb:]
			e := i % typ.BlockElems()
			switch typ {
			case Q8_0:
				codes[i] = uint8(int(int8(blk[2+e])) + 128)
			case Q4_0:
				codes[i] = blk[2+e%16] >> (4 * (e / 16)) & 15
			case Q4_K:
				codes[i] = q4KCode(blk, e)
			}
		}
		if want := PackAffine(codes, a.Bits); !slices.Equal(a.Packed, want) {
			t.Fatalf("%v: packed words differ from PackAffine of the codes", typ)
		}
		got := make([]float32, n)
		DequantizeAffine(got, a.Packed, a.Scales, a.Biases, a.Bits, 32)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v element %d: affine %g, ggml %g", typ, i, got[i], want[i])
			}
		}
	}
	if _, err := GGMLToAffine(Q6_K, 256, make([]byte, 210)); err == nil {
		t.Error("Q6_K converted to affine")
	}
}

// Hand-made blocks against the layouts written out in ggml-common.h.
func TestDequantizeGGMLLayout(t *testing.T) {
	q40 := make([]byte, 18)
	binary.LittleEndian.PutUint16(q40, F32ToF16(0.5))
	q40[2] = 0x9f // element 0: 15-8 = 7; element 16: 9-8 = 1
	y := make([]float32, 32)
	if err := DequantizeGGML(Q4_0, y, q40); err != nil || y[0] != 3.5 || y[16] != 0.5 || y[1] != -4 {
		t.Fatalf("Q4_0: %v %v", y, err)
	}
	q80 := make([]byte, 34)
	binary.LittleEndian.PutUint16(q80, F32ToF16(2))
	q80[2], q80[33] = 0xff, 3
	if err := DequantizeGGML(Q8_0, y, q80); err != nil || y[0] != -2 || y[31] != 6 {
		t.Fatalf("Q8_0: %v %v", y, err)
	}
	q6 := make([]byte, 210)
	binary.LittleEndian.PutUint16(q6[208:], F32ToF16(1))
	for i := range 16 {
		q6[192+i] = byte(i + 1)
	}
	q6[0] = 0x21   // element 0 low nibble 1, element 64 high nibble 2
	q6[128] = 0x03 // element 0 gets high bits 3: q = 1|3<<4 = 49
	y6 := make([]float32, 256)
	if err := DequantizeGGML(Q6_K, y6, q6); err != nil {
		t.Fatal(err)
	}
	if y6[0] != 1*(49-32) || y6[64] != 5*(2-32) || y6[16] != 2*(0-32) || y6[128] != 9*(-32) {
		t.Fatalf("Q6_K: %v %v %v %v", y6[0], y6[64], y6[16], y6[128])
	}
	if err := DequantizeGGML(Q4_0, y, q40[:17]); err == nil {
		t.Error("short block accepted")
	}
}

// Hostile blocks: any bytes dequantize without panicking, and wrong sizes
// are errors.
func FuzzGGML(f *testing.F) {
	f.Add(uint8(1), []byte{1, 2, 3})
	f.Add(uint8(3), make([]byte, 144))
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		g := GGML(typ % 14)
		be, bb := g.BlockElems(), g.BlockBytes()
		n := 0
		if bb > 0 {
			n = len(data) / bb * be
		}
		dst := make([]float32, n)
		if err := DequantizeGGML(g, dst, data); err == nil && bb > 0 && len(data)%bb != 0 {
			t.Fatalf("%v: %d bytes accepted", g, len(data))
		}
		if a, err := GGMLToAffine(g, n, data); err == nil {
			got := make([]float32, n)
			DequantizeAffine(got, a.Packed, a.Scales, a.Biases, a.Bits, 32)
			for i := range got {
				if got[i] != dst[i] && !(got[i] != got[i] && dst[i] != dst[i]) && !isInfNaNCase(a, i) {
					t.Fatalf("%v element %d: affine %g ggml %g", g, i, got[i], dst[i])
				}
			}
		}
	})
}

// isInfNaNCase: with infinite or huge d, d·q + (-8d) is NaN or inf where
// ggml's d·(q-8) is not; such blocks are garbage either way.
func isInfNaNCase(a *AffineOfGGML, i int) bool {
	s, b := a.Scales[i/32], a.Biases[i/32]
	big := func(v float32) bool { return math.IsInf(float64(v), 0) || v != v || math.Abs(float64(v)) > 1e30 }
	return big(s) || big(b)
}

// TestDequantizeAffineDefinition: every element is scale·q + bias of its
// group, q the element's bits of its word, bit for bit, for every width and
// for group sizes that are and are not multiples of a word's elements.
func TestDequantizeAffineDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, bits := range []int{2, 4, 8} {
		per := 32 / bits
		for _, gs := range []int{32, 64, 128, 48, 3} {
			n := 2 * 384 // a multiple of every gs and per above
			packed := make([]uint32, n/per)
			for i := range packed {
				packed[i] = r.Uint32()
			}
			scales, biases := make([]float32, n/gs), make([]float32, n/gs)
			for g := range scales {
				scales[g], biases[g] = float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			got := make([]float32, n)
			DequantizeAffine(got, packed, scales, biases, bits, gs)
			for i := range got {
				q := packed[i/per] >> (bits * (i % per)) & (1<<bits - 1)
				g := i / gs
				if want := float32(scales[g]*float32(q)) + biases[g]; math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("%d bits, groups of %d: element %d = %g, want %g", bits, gs, i, got[i], want)
				}
			}
		}
	}
}

// BenchmarkDequantizeAffine is one 4-bit row of 2048 in groups of 32: what
// QEmbed does for each token it embeds.
func BenchmarkDequantizeAffine(b *testing.B) {
	const n, gs = 2048, 32
	packed, scales, biases := make([]uint32, n/8), make([]float32, n/gs), make([]float32, n/gs)
	dst := make([]float32, n)
	for b.Loop() {
		DequantizeAffine(dst, packed, scales, biases, 4, gs)
	}
}
