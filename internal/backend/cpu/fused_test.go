package cpu

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// The fast CPU backend's fused ops agree with the reference's on the op
// cases the GPU kernels are checked with (the fast backend's products
// differ from the reference's by rounding, as MatMul's do; its quantized
// products round x to 8 bits, hence their looser tolerance: a SwiGLU output,
// a product of two such sums, doubles their relative error).
func TestFusedOpCases(t *testing.T) {
	seed := testenv.Seed(t)
	n := 0
	for _, c := range opcases.All(rand.New(rand.NewPCG(seed, 32))) {
		if !strings.HasPrefix(c.Name, "Linear/") && !strings.HasPrefix(c.Name, "RoPEKVWrite/") {
			continue
		}
		n++
		if strings.Contains(c.Name, "-bit/") {
			c.Tol = 6e-2
		}
		diff, err := opcases.Check(New(2), NewReference(), c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if diff != "" {
			t.Errorf("%s: %s", c.Name, diff)
		}
	}
	if n < 80 {
		t.Fatalf("only %d fused op cases", n)
	}
}
