package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/hostmath"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// TestHostMathInstalled checks that importing the backend installs its
// kernels in hostmath and that they agree with hostmath's reference.
func TestHostMathInstalled(t *testing.T) {
	if got := hostmath.Active(); got != "cpu" {
		t.Fatalf("hostmath.Active() = %q, want cpu", got)
	}
	r := rand.New(rand.NewPCG(testenv.Seed(t), 3))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	for _, s := range [][3]int{{1, 64, 33}, {7, 200, 19}, {16, 2048, 5}} {
		m, k, n := s[0], s[1], s[2]
		x, w := randn(m*k), randn(n*k)
		got, want := make([]float32, m*n), make([]float32, m*n)
		hostmath.MatMul(got, n, x, m, w)
		hostmath.Reference.MatMul(want, n, x, m, w)
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-4*math.Sqrt(float64(k)) {
				t.Fatalf("%v: MatMul[%d] = %g, reference %g", s, i, got[i], want[i])
			}
		}
		y1, y2 := randn(k), make([]float32, k)
		copy(y2, y1)
		hostmath.Axpy(y1, 0.5, x[:k])
		hostmath.Reference.Axpy(y2, 0.5, x[:k])
		hostmath.Scale(y1, 3)
		hostmath.Reference.Scale(y2, 3)
		for i := range y1 {
			if y1[i] != y2[i] {
				t.Fatalf("%v: Axpy then Scale [%d] = %g, reference %g", s, i, y1[i], y2[i])
			}
		}
	}
}
