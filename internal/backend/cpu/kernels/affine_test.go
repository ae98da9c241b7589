package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// affineCase is a quantized [n,k] matrix with its dequantized values.
type affineCase struct {
	w      AffineRows
	dense  []float32
	biases []float32 // each group's bias, as stored
}

func newAffineCase(r *rand.Rand, n, k, bits, gs int, st ScaleType) affineCase {
	v := make([]float32, n*k)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	codes, s, b, err := quant.QuantizeAffine(v, k, bits, gs)
	if err != nil {
		panic(err)
	}
	enc := func(f []float32) []byte {
		out := make([]byte, len(f)*st.Size())
		for i, x := range f {
			switch st {
			case ScalesF16:
				binary.LittleEndian.PutUint16(out[2*i:], quant.F32ToF16(x))
				f[i] = quant.F16ToF32(quant.F32ToF16(x))
			case ScalesBF16:
				binary.LittleEndian.PutUint16(out[2*i:], quant.F32ToBF16(x))
				f[i] = quant.BF16ToF32(quant.F32ToBF16(x))
			default:
				binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
			}
		}
		return out
	}
	c := affineCase{w: AffineRows{Bits: bits, GroupSize: gs, K: k, Codes: codes, ScaleType: st}, dense: make([]float32, n*k)}
	c.w.Scales, c.w.Biases = enc(s), enc(b)
	c.biases = b
	quant.DequantizeAffine(c.dense, codes, s, b, bits, gs)
	return c
}

// affineImpls lists every implementation: the generic one and each
// assembly level this CPU has.
func affineImpls() map[string]func(y []float32, ldy int, x []float32, m int, w AffineRows) {
	impls := map[string]func(y []float32, ldy int, x []float32, m int, w AffineRows){
		"generic": MatMulAffineGeneric,
	}
	for _, ks := range affineKernelSets() {
		impls[ks.name] = ks.call
	}
	return impls
}

// Every implementation agrees with the dot products of x and the
// reference dequantization, at tail and unroll lengths, for every bit
// width, group size and scale type, and for sub-blocks of rows.
func TestMatMulAffine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, f := range affineImpls() {
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				for _, st := range []ScaleType{ScalesF16, ScalesBF16, ScalesF32} {
					for _, k := range []int{32, 64, 96, 128, 160, 256, 384, 1024} {
						if k%gs != 0 {
							continue
						}
						for _, mn := range [][2]int{{1, 1}, {1, 7}, {2, 9}, {3, 17}, {4, 8}, {5, 33}, {9, 3}} {
							m, n := mn[0], mn[1]
							c := newAffineCase(r, n, k, bits, gs, st)
							x := make([]float32, m*k)
							for i := range x {
								x[i] = float32(r.NormFloat64())
							}
							ldy := n + 3
							y := make([]float32, (m-1)*ldy+n)
							f(y, ldy, x, m, c.w)
							for i := range m {
								for j := range n {
									if want, tol := c.want(x, i, j, name == "avx512vnni"); math.Abs(float64(y[i*ldy+j])-want) > tol {
										t.Fatalf("%s %d-bit g%d scales %d k=%d m=%d n=%d: y[%d,%d] = %v, want %v ± %g",
											name, bits, gs, st, k, m, n, i, j, y[i*ldy+j], want, tol)
									}
								}
							}
							// A block of rows gives the same values.
							if n > 2 {
								sub := c.w.Rows(1, n-1)
								y2 := make([]float32, (m-1)*ldy+n)
								f(y2[1:], ldy, x, m, sub)
								for i := range m {
									for j := 1; j < n-1; j++ {
										if y2[i*ldy+j] != y[i*ldy+j] {
											t.Fatalf("%s: rows 1..%d alone give a different [%d,%d]", name, n-1, i, j)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// A row of x gets the same result bit for bit whatever rows share the call.
func TestMatMulAffineBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for name, f := range affineImpls() {
		t.Logf("%s (MatMulAffine uses %s)", name, AffineImpl())
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				k, n, m := 384, 11, 13
				c := newAffineCase(r, n, k, bits, gs, ScalesF16)
				x := make([]float32, m*k)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				all := make([]float32, m*n)
				f(all, n, x, m, c.w)
				for i := range m {
					one := make([]float32, n)
					f(one, n, x[i*k:(i+1)*k], 1, c.w)
					for j := range n {
						if one[j] != all[i*n+j] {
							t.Fatalf("%s %d-bit g%d: row %d col %d: batched %v, alone %v", name, bits, gs, i, j, all[i*n+j], one[j])
						}
					}
				}
			}
		}
	}
}

// x prepared in pieces, concurrently (NewAffineX, PrepareRows), gives the
// products PrepareAffine's does, bit for bit, tiled or not.
func TestPrepareRows(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 5))
	for _, bits := range []int{4, 8} {
		k, n, m := 512, 37, 7
		c := newAffineCase(r, n, k, bits, 32, ScalesF16)
		x := make([]float32, m*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		whole := PrepareAffine(x, m, k, bits, 32)
		pieces := NewAffineX(x, m, k, bits, 32)
		done := make(chan struct{})
		for _, rg := range [][2]int{{0, 2}, {2, 3}, {3, 7}} {
			go func() { pieces.PrepareRows(rg[0], rg[1]); done <- struct{}{} }()
		}
		for range 3 {
			<-done
		}
		want, got := make([]float32, m*n), make([]float32, m*n)
		MatMulAffineX(want, n, whole, c.w)
		MatMulAffineX(got, n, pieces, c.w)
		if tl := PackAffineTiles(c.w); tl != nil {
			wt, gt := make([]float32, m*n), make([]float32, m*n)
			MatMulAffineTilesX(wt, n, whole, *tl)
			MatMulAffineTilesX(gt, n, pieces, *tl)
			want, got = append(want, wt...), append(got, gt...)
		}
		for i := range want {
			if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
				t.Fatalf("%d bits: output %d is %v prepared in pieces, %v at once", bits, i, got[i], want[i])
			}
		}
		whole.Release()
		pieces.Release()
	}
	defer func() {
		if recover() == nil {
			t.Error("PrepareRows(3, 8) of 7 rows did not panic")
		}
	}()
	NewAffineX(make([]float32, 7*32), 7, 32, 4, 32).PrepareRows(3, 8)
}

func TestMatMulAffinePanics(t *testing.T) {
	c := newAffineCase(rand.New(rand.NewPCG(5, 6)), 4, 64, 4, 32, ScalesF16)
	for _, f := range []func(){
		func() { MatMulAffine(make([]float32, 4), 4, make([]float32, 63), 1, c.w) },
		func() { MatMulAffine(make([]float32, 3), 4, make([]float32, 64), 1, c.w) },
		func() { w := c.w; w.Bits = 3; MatMulAffine(make([]float32, 4), 4, make([]float32, 64), 1, w) },
		func() {
			w := c.w
			w.Scales = w.Scales[1:]
			MatMulAffine(make([]float32, 4), 4, make([]float32, 64), 1, w)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

// want is output [i,j] of x·cᵀ in float64, and how far a kernel may be
// from it. With int8 x (the VNNI kernels) the product is of x rounded as
// vnniPrep rounds it (roundedX) with the weights, exactly up to float
// rounding: the biases multiply the sums of the rounded x, so x's rounding
// error is weighed by the weights, not by the codes s·q, which would be up
// to 2^bits steps larger. Float rounding is allowed relative to the
// magnitudes the kernels add (s·q·x and b·x separately), as they cancel.
func (c affineCase) want(x []float32, i, j int, int8x bool) (want, tol float64) {
	k, gs := c.w.K, c.w.GroupSize
	row := x[i*k : (i+1)*k]
	if int8x {
		row = roundedX(row)
	}
	var mag float64
	for kk, xv := range row {
		w, b := float64(c.dense[j*k+kk]), float64(c.biases[(j*k+kk)/gs])
		want += float64(xv) * w
		mag += math.Abs(float64(xv)) * (math.Abs(w-b) + math.Abs(b))
	}
	return want, 2e-6*mag + 1e-7
}

// roundedX is x as the VNNI kernels see it: per block of 32, d·q with
// d = max|x|·(1/127) and q = x·(127/max|x|) rounded to the nearest
// integer, ties to even (vnniPrep's float32 steps).
func roundedX(x []float32) []float32 {
	out := make([]float32, len(x))
	for b := 0; b < len(x); b += 32 {
		blk := x[b:min(b+32, len(x))]
		var m float32
		for _, v := range blk {
			m = max(m, float32(math.Abs(float64(v))))
		}
		d := m * float32(1.0/127)
		inv := 127 / max(m, 0x1p-126)
		for i, v := range blk {
			out[b+i] = d * float32(math.RoundToEven(float64(v*inv)))
		}
	}
	return out
}

// The tile kernel agrees with the dot products of x and the reference
// dequantization within the int8 rounding of x, gives a row of x the same
// bits whatever rows share the call and however the tiles are split, and
// writes nothing of y outside its [m, n] block.
func TestMatMulAffineTiles(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	if !affineTiles {
		if PackAffineTiles(newAffineCase(r, 16, 128, 4, 64, ScalesF16).w) != nil {
			t.Fatal("packed for a tile kernel this build does not have")
		}
		t.Logf("no tile kernel here (affine kernels: %s)", AffineImpl())
		return
	}
	for _, w := range []AffineRows{
		newAffineCase(r, 16, 128, 4, 64, ScalesBF16).w,
		newAffineCase(r, 16, 96, 4, 32, ScalesF16).w,
	} {
		if PackAffineTiles(w) != nil {
			t.Errorf("packed %d bits, scales %d, K=%d", w.Bits, w.ScaleType, w.K)
		}
	}
	for _, bits := range []int{4, 8} {
		for _, st := range []ScaleType{ScalesF16, ScalesF32} {
			for _, gs := range []int{32, 64, 128} {
				for _, k := range []int{128, 256, 384, 1024} {
					for _, mn := range [][2]int{{1, 1}, {1, 16}, {2, 17}, {5, 33}, {8, 40}, {9, 16}, {17, 50}} {
						m, n := mn[0], mn[1]
						c := newAffineCase(r, n, k, bits, gs, st)
						tiles := PackAffineTiles(c.w)
						x := make([]float32, m*k)
						for i := range x {
							x[i] = float32(r.NormFloat64())
						}
						ldy := n + 3
						run := func(x []float32, m int, tw AffineTiles) []float32 {
							y := make([]float32, m*ldy)
							for i := range y {
								y[i] = float32(math.NaN())
							}
							p := PrepareAffine(x, m, k, bits, gs)
							MatMulAffineTilesX(y, ldy, p, tw)
							p.Release()
							for i := range m {
								for j := tw.N; j < ldy; j++ {
									if !math.IsNaN(float64(y[i*ldy+j])) {
										t.Fatalf("g%d k=%d m=%d n=%d: y[%d,%d] written, outside the product", gs, k, m, n, i, j)
									}
								}
							}
							return y
						}
						y := run(x, m, *tiles)
						for i := range m {
							for j := range n {
								if want, tol := c.want(x, i, j, true); math.Abs(float64(y[i*ldy+j])-want) > tol {
									t.Fatalf("%d-bit scales %d g%d k=%d m=%d n=%d: y[%d,%d] = %v, want %v ± %g", bits, st, gs, k, m, n, i, j, y[i*ldy+j], want, tol)
								}
							}
							one := run(x[i*k:(i+1)*k], 1, *tiles)
							for j := range n {
								if one[j] != y[i*ldy+j] {
									t.Fatalf("g%d k=%d m=%d n=%d: row %d col %d: batched %v, alone %v", gs, k, m, n, i, j, y[i*ldy+j], one[j])
								}
							}
						}
						if n > tileRows {
							sub := run(x, m, tiles.Rows(tileRows, n))
							for i := range m {
								for j := tileRows; j < n; j++ {
									if sub[i*ldy+j-tileRows] != y[i*ldy+j] {
										t.Fatalf("g%d k=%d m=%d n=%d: rows from 16 alone give a different [%d,%d]", gs, k, m, n, i, j)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// Packing in place gives the tiles PackAffineTiles gives, in w's own
// memory, and only for whole tiles; Row reads a row back in MLX's layout.
func TestPackAffineTilesInPlace(t *testing.T) {
	if !affineTiles {
		t.Skip("no tile kernel in this build or on this CPU")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, bits := range []int{4, 8} {
		for _, st := range []ScaleType{ScalesF16, ScalesF32} {
			c := newAffineCase(r, 48, 256, bits, 64, st)
			w := c.w
			words := 256 * bits / 32
			orig := AffineRows{Bits: bits, GroupSize: 64, K: 256, ScaleType: st, Codes: slices.Clone(w.Codes),
				Scales: slices.Clone(w.Scales), Biases: slices.Clone(w.Biases)}
			want := PackAffineTiles(orig)
			got := PackAffineTilesInPlace(w)
			if got == nil || &got.codes[0] != &w.Codes[0] || &got.scales[0] != &w.Scales[0] || &got.biases[0] != &w.Biases[0] {
				t.Fatalf("scales %d: not packed in w's memory", st)
			}
			if !slices.Equal(got.codes, want.codes) || !slices.Equal(got.scales, want.scales) || !slices.Equal(got.biases, want.biases) {
				t.Fatalf("scales %d: in-place tiles differ from copied ones", st)
			}
			codes, sc, bi := make([]uint32, words), make([]float32, 4), make([]float32, 4)
			for _, j := range []int{0, 17, 47} {
				got.Row(j, codes, sc, bi)
				if !slices.Equal(codes, orig.Codes[j*words:(j+1)*words]) {
					t.Fatalf("scales %d: Row(%d) codes differ", st, j)
				}
				for g := range 4 {
					if sc[g] != st.at(orig.Scales, j*4+g) || bi[g] != st.at(orig.Biases, j*4+g) {
						t.Fatalf("scales %d: Row(%d) group %d: %v %v", st, j, g, sc[g], bi[g])
					}
				}
			}
			odd := newAffineCase(r, 40, 256, bits, 64, st).w
			before := slices.Clone(odd.Codes)
			if PackAffineTilesInPlace(odd) != nil || !slices.Equal(odd.Codes, before) {
				t.Fatalf("scales %d: 40 rows (not whole tiles) packed in place", st)
			}
		}
	}
}

// newGGMLCase is an [n,k] matrix of random GGUF Q4_0 or Q8_0 blocks,
// converted as the model loader converts them (quant.GGMLToAffine), with f16
// scales and biases: symmetric groups, each bias -2^(bits-1) times its scale.
func newGGMLCase(r *rand.Rand, n, k int, typ quant.GGML) affineCase {
	a := ggmlAffine(r, n, k, typ)
	c := affineCase{w: ggmlRows(a, k), dense: make([]float32, n*k), biases: a.Biases}
	quant.DequantizeAffine(c.dense, a.Packed, a.Scales, a.Biases, a.Bits, 32)
	return c
}

// ggmlAffine converts n×k elements of random typ blocks, with scales of
// ordinary magnitude and either sign, to the affine form.
func ggmlAffine(r *rand.Rand, n, k int, typ quant.GGML) *quant.AffineOfGGML {
	blocks := make([]byte, n*k/32*typ.BlockBytes())
	for i := range blocks {
		blocks[i] = byte(r.Uint32())
	}
	for b := 0; b < len(blocks); b += typ.BlockBytes() {
		binary.LittleEndian.PutUint16(blocks[b:], quant.F32ToF16(float32(r.NormFloat64())/64))
	}
	a, err := quant.GGMLToAffine(typ, n*k, blocks)
	if err != nil || !a.F16 {
		panic(fmt.Sprintf("GGMLToAffine: %v, f16 %v", err, a != nil && a.F16))
	}
	return a
}

// ggmlRows is a's rows of k elements, f16 scales and biases.
func ggmlRows(a *quant.AffineOfGGML, k int) AffineRows {
	return AffineRows{Bits: a.Bits, GroupSize: 32, K: k, Codes: a.Packed, ScaleType: ScalesF16,
		Scales: f16Bytes(a.Scales), Biases: f16Bytes(a.Biases)}
}

// f16Bytes encodes v as little-endian f16 values.
func f16Bytes(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], quant.F32ToF16(x))
	}
	return out
}

// GGUF's Q4_0 and Q8_0 weights pack as symmetric tiles, without biases, and
// give the bits the biased kernel gives on the same weights: a copy whose
// last row's last bias is one f16 step off packs with biases, and agrees
// with the symmetric tiles bit for bit on every other row. Row reads the
// biases back.
func TestSymmetricTiles(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	if !affineTiles {
		if hasSymmetricTiles(4, 32, ScalesF16) {
			t.Fatal("symmetric tiles without a tile kernel")
		}
		t.Logf("no tile kernel here (affine kernels: %s)", AffineImpl())
		return
	}
	for _, typ := range []quant.GGML{quant.Q4_0, quant.Q8_0} {
		for _, k := range []int{128, 256, 640} {
			for _, mn := range [][2]int{{1, 16}, {1, 50}, {5, 33}, {8, 40}, {9, 17}} {
				m, n := mn[0], mn[1]
				c := newGGMLCase(r, n, k, typ)
				sym := PackAffineTiles(c.w)
				if !sym.Symmetric || sym.biases != nil {
					t.Fatalf("%v k=%d n=%d: packed with biases", typ, k, n)
				}
				off := c.w
				off.Biases = slices.Clone(c.w.Biases)
				last := len(off.Biases) - 2
				binary.LittleEndian.PutUint16(off.Biases[last:], binary.LittleEndian.Uint16(off.Biases[last:])+1)
				biased := PackAffineTiles(off)
				if biased.Symmetric {
					t.Fatalf("%v k=%d n=%d: a bias off by one step still packs symmetric", typ, k, n)
				}
				x := make([]float32, m*k)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				run := func(tw *AffineTiles) []float32 {
					y := make([]float32, m*n)
					p := PrepareAffine(x, m, k, c.w.Bits, 32)
					MatMulAffineTilesX(y, n, p, *tw)
					p.Release()
					return y
				}
				ys, yb := run(sym), run(biased)
				for i := range m {
					for j := range n {
						if want, tol := c.want(x, i, j, true); math.Abs(float64(ys[i*n+j])-want) > tol {
							t.Fatalf("%v k=%d m=%d n=%d: y[%d,%d] = %v, want %v ± %g", typ, k, m, n, i, j, ys[i*n+j], want, tol)
						}
						if j < n-1 && math.Float32bits(ys[i*n+j]) != math.Float32bits(yb[i*n+j]) {
							t.Fatalf("%v k=%d m=%d n=%d: y[%d,%d] symmetric %v, biased %v", typ, k, m, n, i, j, ys[i*n+j], yb[i*n+j])
						}
					}
				}
				if n > tileRows {
					sub := sym.Rows(tileRows, n)
					y := make([]float32, m*n)
					p := PrepareAffine(x, m, k, c.w.Bits, 32)
					MatMulAffineTilesX(y, n, p, sub)
					p.Release()
					for i := range m {
						for j := tileRows; j < n; j++ {
							if y[i*n+j-tileRows] != ys[i*n+j] {
								t.Fatalf("%v k=%d m=%d n=%d: rows from 16 alone give a different [%d,%d]", typ, k, m, n, i, j)
							}
						}
					}
				}
				groups := k / 32
				codes, sc, bi := make([]uint32, k*c.w.Bits/32), make([]float32, groups), make([]float32, groups)
				sym.Row(n-2, codes, sc, bi)
				for g := range groups {
					if bi[g] != c.biases[(n-2)*groups+g] {
						t.Fatalf("%v: Row(%d) group %d bias %v, want %v", typ, n-2, g, bi[g], c.biases[(n-2)*groups+g])
					}
				}
			}
		}
	}
	// In place: the same tiles, in w's memory, w's biases untouched.
	c := newGGMLCase(r, 48, 256, quant.Q4_0)
	want := PackAffineTiles(AffineRows{Bits: 4, GroupSize: 32, K: 256, ScaleType: ScalesF16, Codes: slices.Clone(c.w.Codes),
		Scales: slices.Clone(c.w.Scales), Biases: slices.Clone(c.w.Biases)})
	biases := slices.Clone(c.w.Biases)
	got := PackAffineTilesInPlace(c.w)
	if got == nil || !got.Symmetric || got.biases != nil || &got.codes[0] != &c.w.Codes[0] {
		t.Fatal("Q4_0 in place: not packed as symmetric tiles in w's memory")
	}
	if !slices.Equal(got.codes, want.codes) || !slices.Equal(got.scales, want.scales) || !slices.Equal(c.w.Biases, biases) {
		t.Fatal("Q4_0 in place: tiles differ from copied ones, or w's biases were written")
	}
}

// symmetricBias agrees with the float product, rounded to f16, for every f16
// scale it takes, and takes every normal scale whose product stays normal.
func TestSymmetricBias(t *testing.T) {
	for _, k := range []uint16{3, 7} {
		zero := -float32(int(1) << k)
		taken := 0
		for u := range 1 << 16 {
			s := uint16(u)
			b, ok := symmetricBias(s, k)
			p := zero * quant.F16ToF32(s)
			if !ok {
				continue
			}
			taken++
			if quant.F16ToF32(b) != p || b != quant.F32ToF16(p) {
				t.Fatalf("k=%d scale %#04x: bias %#04x (%v), want %v", k, s, b, quant.F16ToF32(b), p)
			}
		}
		// Exponents 1 … 30-k, both signs, 1024 mantissas each.
		if want := 2 * (30 - int(k)) * 1024; taken != want {
			t.Errorf("k=%d: %d scales take the integer path, want %d", k, taken, want)
		}
	}
}
