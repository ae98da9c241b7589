package hostmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// CheckKernels compares k with float64 sums on fresh random inputs of many
// shapes; backends call it on the kernels they install.
func checkKernels(t *testing.T, k Kernels, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	for _, s := range [][3]int{{1, 1, 1}, {1, 7, 3}, {3, 16, 5}, {5, 33, 17}, {17, 64, 40}, {2, 130, 9}} {
		m, kk, n := s[0], s[1], s[2]
		x, w := randn(m*kk), randn(n*kk)
		ldy := n + 3
		y := randn(m * ldy) // the gaps between rows must survive
		gap := append([]float32(nil), y...)
		k.MatMul(y, ldy, x, m, w)
		for i := range m {
			for j := range ldy {
				got := y[i*ldy+j]
				if j >= n {
					if got != gap[i*ldy+j] {
						t.Fatalf("%s MatMul %v: wrote y[%d,%d] outside the output", k.Name, s, i, j)
					}
					continue
				}
				var want, mag float64
				for p := range kk {
					want += float64(x[i*kk+p]) * float64(w[j*kk+p])
					mag += math.Abs(float64(x[i*kk+p]) * float64(w[j*kk+p]))
				}
				if d := math.Abs(float64(got) - want); d > 1e-5*mag+1e-6 {
					t.Fatalf("%s MatMul %v: y[%d,%d] = %g, want %g", k.Name, s, i, j, got, want)
				}
			}
		}
	}
	for _, n := range []int{0, 1, 15, 16, 17, 100} {
		x, y := randn(n), randn(n)
		want := make([]float64, n)
		for i := range n {
			want[i] = float64(y[i]) + 0.75*float64(x[i])
		}
		k.Axpy(y, 0.75, x)
		for i := range n {
			if math.Abs(float64(y[i])-want[i]) > 1e-6*(1+math.Abs(want[i])) {
				t.Fatalf("%s Axpy n=%d: y[%d] = %g, want %g", k.Name, n, i, y[i], want[i])
			}
		}
		v := randn(n)
		orig := append([]float32(nil), v...)
		k.Scale(v, -1.5)
		for i := range n {
			if v[i] != orig[i]*-1.5 {
				t.Fatalf("%s Scale n=%d: x[%d] = %g, want %g", k.Name, n, i, v[i], orig[i]*-1.5)
			}
		}
	}
}

func TestReference(t *testing.T) { checkKernels(t, Reference, 7) }

func TestInstall(t *testing.T) {
	prev := *active.Load()
	defer Install(prev)
	calls := 0
	k := Reference
	k.Name = "counting"
	k.Axpy = func(y []float32, a float32, x []float32) { calls++; axpy(y, a, x) }
	Install(k)
	if Active() != "counting" {
		t.Fatalf("Active() = %q after Install", Active())
	}
	Axpy([]float32{1}, 2, []float32{3})
	if calls != 1 {
		t.Errorf("Axpy went to the installed kernels %d times, want 1", calls)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("Install with a missing operation did not panic")
		}
	}()
	Install(Kernels{Name: "partial", Axpy: axpy})
}

func TestMatMulPanicsOnBadShapes(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("MatMul with len(x) not a multiple of m did not panic")
		}
	}()
	Reference.MatMul(make([]float32, 4), 2, make([]float32, 5), 2, make([]float32, 4))
}
