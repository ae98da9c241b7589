package quant

import (
	"math"
	"testing"
)

// Every half value must survive half -> float32 -> half unchanged.
func TestF16RoundTripAll(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		if f != f { // NaN: payload may be quietened
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)=%g) = %#04x", h, f, g)
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00},
		{65504, 0x7bff},
		{65520, 0x7c00},        // rounds to inf
		{1 + 1.0/2048, 0x3c00}, // tie, even stays
		{1 + 3.0/2048, 0x3c02}, // tie, odd rounds up
		{float32(math.Ldexp(1, -24)), 0x0001},
		{float32(math.Ldexp(1, -25)), 0x0000}, // tie to even zero
		{float32(math.Ldexp(3, -26)), 0x0001},
		{-2, 0xc000},
	}
	for _, c := range cases {
		if got := F32ToF16(c.in); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

func TestBF16(t *testing.T) {
	for _, f := range []float32{0, 1, -1.5, 3.140625, 1e30, -1e-30} {
		if got := BF16ToF32(F32ToBF16(f)); math.Abs(float64(got-f)) > math.Abs(float64(f))/128 {
			t.Errorf("bf16 round trip %g -> %g", f, got)
		}
	}
	if F32ToBF16(1.00390625) != 0x3f80 { // tie to even
		t.Errorf("bf16 tie rounding")
	}
}

func TestHalfSlices(t *testing.T) {
	v := []float32{0, 1, -2.5, 65504, 1e-8, float32(math.Inf(-1)), 3.14159}
	h, b := F32sToF16(v), F32sToBF16(v)
	for i, x := range v {
		if h[i] != F32ToF16(x) || b[i] != F32ToBF16(x) {
			t.Errorf("%v: F32sToF16 %#x (want %#x), F32sToBF16 %#x (want %#x)", x, h[i], F32ToF16(x), b[i], F32ToBF16(x))
		}
	}
}
