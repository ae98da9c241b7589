package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Benchmarks of the affine kernels. "cold" rotates over 1.5 GiB of packed
// codes (with their scales and biases), far beyond the caches, so every
// call streams its weights from DRAM; "hot" reuses one matrix. GB/s counts
// the bytes a decode step reads: codes plus f16 scales and biases.
// BenchmarkAffineBandwidth is the streaming-read roofline measured the
// same way (a sum of squares over 1.5 GiB of float32), to compare in the
// same run.

const affineColdBytes = 3 << 29

var (
	affineColdOnce sync.Once
	affineCold     []uint32 // codes
	affineColdS    []byte   // f16 scales (shared pattern) for the whole buffer at g32
	affineColdF    []float32
)

func affineBuffers() ([]uint32, []byte, []float32) {
	affineColdOnce.Do(func() {
		r := rand.New(rand.NewPCG(1, 2))
		affineCold = make([]uint32, affineColdBytes/4)
		for i := range affineCold {
			affineCold[i] = r.Uint32()
		}
		// Enough scales for 4-bit codes in groups of 32: one per 16 bytes.
		affineColdS = make([]byte, affineColdBytes/16*2)
		for i := 0; i < len(affineColdS); i += 2 {
			h := quant.F32ToF16(float32(r.NormFloat64() * 0.01))
			affineColdS[i], affineColdS[i+1] = byte(h), byte(h>>8)
		}
		affineColdF = make([]float32, affineColdBytes/4)
		for i := range affineColdF {
			affineColdF[i] = float32(i % 17)
		}
	})
	return affineCold, affineColdS, affineColdF
}

// affineParallel runs f over [0, n) in t contiguous blocks (multiples of 8).
func affineParallel(t, n int, f func(lo, hi int)) {
	if t == 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range t {
		lo, hi := (n*i/t)&^7, (n*(i+1)/t)&^7
		if i == t-1 {
			hi = n
		}
		wg.Add(1)
		go func() { defer wg.Done(); f(lo, hi) }()
	}
	wg.Wait()
}

func BenchmarkAffineBandwidth(b *testing.B) {
	_, _, buf := affineBuffers()
	for _, t := range []int{1, 2} {
		b.Run(fmt.Sprintf("t=%d", t), func(b *testing.B) {
			b.SetBytes(int64(len(buf)) * 4)
			var sink [2]float32
			for b.Loop() {
				affineParallel(t, len(buf), func(lo, hi int) { sink[lo*t/len(buf)] += SumSquares(buf[lo:hi]) })
			}
		})
	}
}

// BenchmarkAffineMatVec: y[N] = W[N,K]·x with K = N = 4096 (a 7B-class
// projection), decode shape. m=16 is a verification batch.
func BenchmarkAffineMatVec(b *testing.B) {
	const n, k = 4096, 4096
	codes, scales, _ := affineBuffers()
	impls := affineImpls()
	for _, name := range []string{"generic", "avx2", "avx512", "avx512vnni"} {
		f, ok := impls[name]
		if !ok {
			continue
		}
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				for _, m := range []int{1, 5, 16} {
					for _, cold := range []bool{true, false} {
						for _, t := range []int{1, 2} {
							if name == "generic" && (cold || t == 2 || m > 1) {
								continue
							}
							if (m > 1 || bits == 8) && gs != 64 {
								continue
							}
							mode := map[bool]string{false: "hot", true: "cold"}[cold]
							b.Run(fmt.Sprintf("%s/q%d/g%d/m=%d/%s/t=%d", name, bits, gs, m, mode, t), func(b *testing.B) {
								words := n * k * bits / 32
								sb := n * k / gs * 2
								mats := len(codes) / words
								x := make([]float32, m*k)
								for i := range x {
									x[i] = float32(i%7) - 3
								}
								y := make([]float32, m*n)
								b.SetBytes(int64(words*4 + 2*sb))
								i := 0
								if t == 1 {
									runtime.LockOSThread()
									defer runtime.UnlockOSThread()
								}
								c0 := threadCPU()
								for b.Loop() {
									mi := 0
									if cold {
										mi = i % mats
									}
									w := AffineRows{Bits: bits, GroupSize: gs, K: k, Codes: codes[mi*words : (mi+1)*words],
										Scales: scales[mi*sb/2 : mi*sb/2+sb], Biases: scales[mi*sb/2+sb/4 : mi*sb/2+sb/4+sb]}
									affineParallel(t, n, func(lo, hi int) { f(y[lo:], n, x, m, w.Rows(lo, hi)) })
									i++
								}
								if c := threadCPU() - c0; t == 1 && c > 0 {
									// The thread's CPU time, not the wall clock: other tenants'
									// time slices do not count.
									b.ReportMetric(float64(words*4+2*sb)*float64(i)/c.Seconds()/1e9, "GB/s-cpu")
								}
							})
						}
					}
				}
			}
		}
	}
}

// BenchmarkAffineRoofline interleaves, call by call, a streaming read of
// float32s and a cold 4-bit matvec over the same number of bytes (both
// rotating through 1.5 GiB, both on t goroutines), and reports each one's
// GB/s and their ratio: the fraction of the streaming bandwidth the kernel
// reaches, measured under the same background load.
func BenchmarkAffineRoofline(b *testing.B) {
	const n, k = 4096, 4096
	codes, scales, floats := affineBuffers()
	for _, gs := range []int{32, 64, 128} {
		for _, t := range []int{1, 2} {
			b.Run(fmt.Sprintf("q4/g%d/t=%d", gs, t), func(b *testing.B) {
				words := n * k / 8
				sb := n * k / gs * 2
				bytes := words*4 + 2*sb
				mats := len(codes) / words
				chunk := bytes / 4 // floats streamed per call: the same bytes
				chunks := len(floats) / chunk
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(i%7) - 3
				}
				y := make([]float32, n)
				var tk, tb, ck, cb time.Duration // wall and (t=1) thread CPU time
				var sink [2]float32
				if t == 1 {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
				}
				i := 0
				for b.Loop() {
					mi := i % mats
					w := AffineRows{Bits: 4, GroupSize: gs, K: k, Codes: codes[mi*words : (mi+1)*words],
						Scales: scales[mi*sb/2 : mi*sb/2+sb], Biases: scales[mi*sb/2+sb/4 : mi*sb/2+sb/4+sb]}
					start, c0 := time.Now(), threadCPU()
					affineParallel(t, n, func(lo, hi int) { MatMulAffine(y[lo:], n, x, 1, w.Rows(lo, hi)) })
					tk += time.Since(start)
					ck += threadCPU() - c0
					f := floats[(i%chunks)*chunk : (i%chunks+1)*chunk]
					start, c0 = time.Now(), threadCPU()
					affineParallel(t, len(f), func(lo, hi int) { sink[lo*t/len(f)] += SumSquares(f[lo:hi]) })
					tb += time.Since(start)
					cb += threadCPU() - c0
					i++
				}
				total := float64(bytes) * float64(i) / 1e9
				kern, bw := total/tk.Seconds(), total/tb.Seconds()
				b.ReportMetric(kern, "kernel-GB/s")
				b.ReportMetric(bw, "stream-GB/s")
				b.ReportMetric(kern/bw, "fraction")
				if t == 1 && ck > 0 && cb > 0 {
					// On-CPU rates: time the thread was descheduled does not count.
					b.ReportMetric(total/ck.Seconds(), "kernel-GB/s-cpu")
					b.ReportMetric(total/cb.Seconds(), "stream-GB/s-cpu")
					b.ReportMetric(cb.Seconds()/ck.Seconds(), "fraction-cpu")
				}
			})
		}
	}
}

// BenchmarkAffineTiles is BenchmarkAffineMatVec's groups of 64, one-goroutine
// cases for the tile kernel (weights packed once, outside the timing),
// beside the chunk kernel it replaces, at the decode (m=1) and
// verification (m=5, 16) shapes, for 4- and 8-bit weights.
func BenchmarkAffineTiles(b *testing.B) {
	if !affineTiles {
		b.Skip("no tile kernel on this machine")
	}
	const n, k, gs = 4096, 4096, 64
	codes, scales, _ := affineBuffers()
	for _, bits := range []int{4, 8} {
		words, sb := n*k*bits/32, n*k/gs*2
		mats := len(codes) / words
		mat := func(i int) AffineRows {
			return AffineRows{Bits: bits, GroupSize: gs, K: k, Codes: codes[i*words : (i+1)*words],
				Scales: scales[i*sb/2 : i*sb/2+sb], Biases: scales[i*sb/2+sb/4 : i*sb/2+sb/4+sb]}
		}
		var tiles []*AffineTiles
		for _, m := range []int{1, 5, 16} {
			for _, cold := range []bool{true, false} {
				for _, kernel := range []string{"chunks", "tiles"} {
					mode := map[bool]string{false: "hot", true: "cold"}[cold]
					b.Run(fmt.Sprintf("q%d/%s/m=%d/%s", bits, kernel, m, mode), func(b *testing.B) {
						if kernel == "tiles" && tiles == nil {
							for i := range mats {
								tiles = append(tiles, PackAffineTiles(mat(i)))
							}
						}
						x := make([]float32, m*k)
						for i := range x {
							x[i] = float32(i%7) - 3
						}
						y := make([]float32, m*n)
						b.SetBytes(int64(words*4 + 2*sb))
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						i := 0
						c0 := threadCPU()
						for b.Loop() {
							mi := 0
							if cold {
								mi = i % mats
							}
							p := PrepareAffine(x, m, k, bits, gs)
							if kernel == "tiles" {
								MatMulAffineTilesX(y, n, p, *tiles[mi])
							} else {
								MatMulAffineX(y, n, p, mat(mi))
							}
							p.Release()
							i++
						}
						if c := threadCPU() - c0; c > 0 {
							b.ReportMetric(float64(words*4+2*sb)*float64(i)/c.Seconds()/1e9, "GB/s-cpu")
						}
					})
				}
			}
		}
	}
}

// BenchmarkGGMLTiles compares, on 4096×4096 GGUF Q4_0 and Q8_0 weights
// (converted as the loader converts them), the symmetric tile kernel with
// the biased one on the same weights, one goroutine, at the decode (m=1) and
// verification (m=5) shapes. Each kernel takes in turn copies that fill
// coldBytes/2, several times any last-level cache this has run on, so its
// weights come from DRAM. The bytes per op are the bytes each reads.
func BenchmarkGGMLTiles(b *testing.B) {
	if !affineTiles {
		b.Skip("no tile kernel on this machine")
	}
	const n, k = 4096, 4096
	r := rand.New(rand.NewPCG(1, 1))
	for _, typ := range []quant.GGML{quant.Q4_0, quant.Q8_0} {
		copies := coldBytes / 2 / (n * k / 32 * typ.BlockBytes())
		var sym, biased []*AffineTiles
		for range copies {
			w := ggmlRows(ggmlAffine(r, n, k, typ), k)
			sym = append(sym, PackAffineTiles(w))
			// One bias off by one step: the same weights, packed with their biases.
			w.Biases[0] ^= 1
			biased = append(biased, PackAffineTiles(w))
		}
		if !sym[0].Symmetric || biased[0].Symmetric {
			b.Fatalf("%v: not packed as expected", typ)
		}
		for _, m := range []int{1, 5} {
			for _, kernel := range []string{"biased", "symmetric"} {
				b.Run(fmt.Sprintf("%v/m=%d/%s", typ, m, kernel), func(b *testing.B) {
					tiles := map[string][]*AffineTiles{"biased": biased, "symmetric": sym}[kernel]
					bytes := len(tiles[0].codes)*4 + len(tiles[0].scales) + len(tiles[0].biases)
					x := make([]float32, m*k)
					for i := range x {
						x[i] = float32(r.NormFloat64())
					}
					y := make([]float32, m*n)
					b.SetBytes(int64(bytes))
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					i := 0
					for b.Loop() {
						p := PrepareAffine(x, m, k, tiles[0].Bits, 32)
						MatMulAffineTilesX(y, n, p, *tiles[i%len(tiles)])
						p.Release()
						i++
					}
				})
			}
		}
	}
}

// BenchmarkGGMLTilesHot is the symmetric Q4_0 tile kernel on a 512×2048
// matrix (590 KB, resident in L2), one goroutine, m = 1 to 8 rows of x: the
// kernel's own arithmetic rate, against which a cold product's GB/s shows
// whether memory or the vector ports bound it. GB/s counts the matrix's
// bytes; GB/s-cpu divides them by the thread's CPU time.
func BenchmarkGGMLTilesHot(b *testing.B) {
	if !affineTiles {
		b.Skip("no tile kernel on this machine")
	}
	const n, k = 512, 2048
	r := rand.New(rand.NewPCG(1, 1))
	t := PackAffineTiles(ggmlRows(ggmlAffine(r, n, k, quant.Q4_0), k))
	if !t.Symmetric {
		b.Fatal("Q4_0 weights not packed as symmetric tiles")
	}
	bytes := len(t.codes)*4 + len(t.scales) + len(t.biases)
	for m := 1; m <= 8; m++ {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			x := make([]float32, m*k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			y := make([]float32, m*n)
			b.SetBytes(int64(bytes))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p := PrepareAffine(x, m, k, 4, 32)
			defer p.Release()
			i := 0
			c0 := threadCPU()
			for b.Loop() {
				MatMulAffineTilesX(y, n, p, *t)
				i++
			}
			if c := threadCPU() - c0; c > 0 {
				b.ReportMetric(float64(bytes)*float64(i)/c.Seconds()/1e9, "GB/s-cpu")
			}
		})
	}
}

// BenchmarkPrepareAffine is the rounding of x for the VNNI kernels: 7 rows
// of 2048 (a 7-token verification pass's x), once per product.
func BenchmarkPrepareAffine(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const m, k = 7, 2048
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, bits := range []int{4, 8} {
		b.Run(fmt.Sprintf("q%d", bits), func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				PrepareAffine(x, m, k, bits, 32).Release()
			}
		})
	}
}
