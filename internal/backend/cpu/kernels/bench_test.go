package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Benchmarks. "hot" reuses one weight matrix; "cold" rotates over copies
// totalling ≥ 1.5 GiB, far beyond this machine's L3, so every call streams
// its weights from DRAM. t=2 splits the weight rows between two goroutines
// (rows rounded to multiples of 4) the way the CPU backend does.
// BenchmarkBandwidth gives the streaming-read roofline to compare against.

const coldBytes = 3 << 29 // 1.5 GiB

// onCPU measures a benchmark's process CPU time, so that rates can also be
// stated per second *on CPU* ("-cpu" metrics): on a shared machine the
// wall-clock figures include time our threads spent descheduled. With t
// goroutines busy, the on-CPU time of the run is cpu/t.
type onCPU struct {
	b  *testing.B
	t  int
	c0 time.Duration
}

func startCPU(b *testing.B, t int) onCPU { return onCPU{b, t, processCPU()} }

// report adds name-cpu = perOp*N / (cpu/t), with perOp in units of 1e9.
func (c onCPU) report(perOp float64, name string) {
	cpu := processCPU() - c.c0
	if cpu <= 0 {
		return
	}
	c.b.ReportMetric(perOp*float64(c.b.N)/(cpu.Seconds()/float64(c.t))/1e9, name+"-cpu")
}

// parallel runs f over [0, n) split into t contiguous blocks whose bounds are
// multiples of 4.
func parallel(t, n int, f func(lo, hi int)) {
	if t == 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range t {
		lo, hi := (n*i/t)&^3, (n*(i+1)/t)&^3
		if i == t-1 {
			hi = n
		}
		wg.Add(1)
		go func() { defer wg.Done(); f(lo, hi) }()
	}
	wg.Wait()
}

var (
	coldOnce sync.Once
	coldF32  []float32 // coldBytes of float32
	coldU16  []uint16  // coldBytes of 16-bit weights (values valid as F16 and BF16)
)

func coldBuffers() ([]float32, []uint16) {
	coldOnce.Do(func() {
		r := rand.New(rand.NewPCG(1, 2))
		seedF := make([]float32, 1<<20)
		seedU := make([]uint16, 1<<20)
		for i := range seedF {
			seedF[i] = float32(r.NormFloat64())
			seedU[i] = quant.F32ToBF16(float32(r.NormFloat64())) // ~0.5..2 read as F16
		}
		coldF32 = make([]float32, coldBytes/4)
		coldU16 = make([]uint16, coldBytes/2)
		for i := 0; i < len(coldF32); i += len(seedF) {
			copy(coldF32[i:], seedF)
		}
		for i := 0; i < len(coldU16); i += len(seedU) {
			copy(coldU16[i:], seedU)
		}
	})
	return coldF32, coldU16
}

// BenchmarkBandwidth streams 1.5 GiB through SumSquares: the read roofline.
func BenchmarkBandwidth(b *testing.B) {
	buf, _ := coldBuffers()
	for _, t := range []int{1, 2} {
		b.Run(fmt.Sprintf("t=%d", t), func(b *testing.B) {
			b.SetBytes(int64(len(buf)) * 4)
			var sink [2]float32
			c := startCPU(b, t)
			for b.Loop() {
				parallel(t, len(buf), func(lo, hi int) { sink[lo*t/len(buf)] += SumSquares(buf[lo:hi]) })
			}
			c.report(float64(len(buf))*4, "GB/s")
		})
	}
}

// weights returns the i-th of the matrices of size elements carved out of
// buf (cold) or always the first one (hot).
func weights[T any](buf []T, size, i int, cold bool) []T {
	if !cold {
		return buf[:size]
	}
	i %= len(buf) / size
	return buf[i*size : (i+1)*size]
}

func BenchmarkMatVec(b *testing.B) {
	const n, k = 4096, 4096
	bufF, bufU := coldBuffers()
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	y := make([]float32, n)
	for _, s := range Sets() {
		for _, dt := range []string{"F32", "F16", "BF16"} {
			if s.Name == "generic" && dt != "F32" {
				continue
			}
			for _, cold := range []bool{false, true} {
				for _, t := range []int{1, 2} {
					mode := map[bool]string{false: "hot", true: "cold"}[cold]
					b.Run(fmt.Sprintf("%s/%s/%s/t=%d", s.Name, dt, mode, t), func(b *testing.B) {
						i := 0
						c := startCPU(b, t)
						switch dt {
						case "F32":
							b.SetBytes(n * k * 4)
							for b.Loop() {
								w := weights(bufF, n*k, i, cold)
								parallel(t, n, func(lo, hi int) { s.MatVecF32(y[lo:hi], w[lo*k:hi*k], x) })
								i++
							}
							c.report(n*k*4, "GB/s")
						default:
							f := s.MatVecF16
							if dt == "BF16" {
								f = s.MatVecBF16
							}
							b.SetBytes(n * k * 2)
							for b.Loop() {
								w := weights(bufU, n*k, i, cold)
								parallel(t, n, func(lo, hi int) { f(y[lo:hi], w[lo*k:hi*k], x) })
								i++
							}
							c.report(n*k*2, "GB/s")
						}
					})
				}
			}
		}
	}
}

// BenchmarkMatMul is the verification/prefill shape: y[M,N] = x[M,K]·w[N,K]ᵀ
// with K = N = 2048. Hot: w (8 or 16 MiB) stays in L3. GFLOP/s counts 2MNK.
func BenchmarkMatMul(b *testing.B) {
	const n, k = 2048, 2048
	bufF, bufU := coldBuffers()
	x := make([]float32, 17*k)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	y := make([]float32, 17*n)
	for _, s := range Sets()[1:] {
		for _, dt := range []string{"F32", "F16", "BF16"} {
			for _, m := range []int{1, 5, 9, 17} {
				for _, cold := range []bool{false, true} {
					if cold && (m == 9 || m == 17) {
						continue
					}
					for _, t := range []int{1, 2} {
						mode := map[bool]string{false: "hot", true: "cold"}[cold]
						b.Run(fmt.Sprintf("%s/%s/M=%d/%s/t=%d", s.Name, dt, m, mode, t), func(b *testing.B) {
							i := 0
							xm := x[:m*k]
							c := startCPU(b, t)
							switch dt {
							case "F32":
								b.SetBytes(n * k * 4)
								for b.Loop() {
									w := weights(bufF, n*k, i, cold)
									parallel(t, n, func(lo, hi int) { s.MatMulF32(y[lo:], n, xm, m, w[lo*k:hi*k]) })
									i++
								}
							default:
								f := s.MatMulF16
								if dt == "BF16" {
									f = s.MatMulBF16
								}
								b.SetBytes(n * k * 2)
								for b.Loop() {
									w := weights(bufU, n*k, i, cold)
									parallel(t, n, func(lo, hi int) { f(y[lo:], n, xm, m, w[lo*k:hi*k]) })
									i++
								}
							}
							b.ReportMetric(2*float64(m)*n*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
							c.report(2*float64(m)*n*k, "GFLOP/s")
						})
					}
				}
			}
		}
	}
}

// BenchmarkSmall covers the short vectors of attention (head sizes 64 and
// 128), where call overhead matters, and one long vector.
func BenchmarkSmall(b *testing.B) {
	for _, s := range Sets() {
		for _, n := range []int{64, 128, 4096} {
			x, y := make([]float32, n), make([]float32, n)
			h := make([]uint16, n)
			for i := range x {
				x[i], y[i], h[i] = 1, 2, 0x3c00
			}
			var sink float32
			b.Run(fmt.Sprintf("%s/DotF32/n=%d", s.Name, n), func(b *testing.B) {
				b.SetBytes(int64(8 * n))
				for b.Loop() {
					sink += s.DotF32(x, y)
				}
			})
			b.Run(fmt.Sprintf("%s/DotF16/n=%d", s.Name, n), func(b *testing.B) {
				b.SetBytes(int64(6 * n))
				for b.Loop() {
					sink += s.DotF16(h, y)
				}
			})
			b.Run(fmt.Sprintf("%s/Axpy/n=%d", s.Name, n), func(b *testing.B) {
				b.SetBytes(int64(8 * n))
				for b.Loop() {
					s.Axpy(y, 1e-9, x)
				}
			})
			b.Run(fmt.Sprintf("%s/ConvertF16ToF32/n=%d", s.Name, n), func(b *testing.B) {
				b.SetBytes(int64(6 * n))
				for b.Loop() {
					s.ConvertF16ToF32(x, h)
				}
			})
		}
	}
}
