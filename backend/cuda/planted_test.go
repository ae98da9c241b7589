package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/backend/cuda/shaders"
)

// TestHarnessCatchesPlantedBugs plants bugs in copies of the kernels and
// checks that the cases that reach them now fail: a missing
// __syncthreads (the emulator runs each block's threads as fibers, so a
// read of shared memory before the other warps wrote it shows), and wrong
// indices.
func TestHarnessCatchesPlantedBugs(t *testing.T) {
	for _, bug := range []struct{ file, from, to, cases string }{
		// The warps' softmax states are merged before every warp stored its own.
		{"attention.cu", "\tsync_threads();\n\tfloat m = wm[0];", "\tfloat m = wm[0];", "Attention/f32/tree/N9_H6_KVH2_D33_past20"},
		// A tree token sees its new keys as if the tree were a chain.
		{"attention.cu", "if (end[j] < i) continue;", "if (j > i) continue;", "Attention/f16/tree/N9_H6_KVH2_D33_past20"},
		// The quantized matvec takes the scale of the row's first group.
		{"quant.cu", "const u64 g = grow + u64(j * per / gs);", "const u64 g = grow;", "QMatMul/4-bit/g32/f16/M3_K96_N9"},
		// Top-k forgets that an equal value after the previous choice is next.
		{"reduce.cu", "(e == pv && i > pi)", "(e == pv && i < pi)", "TopK/M3_V1001_K5_ties"},
	} {
		raw, err := shaders.Source(bug.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(raw, bug.from) {
			t.Fatalf("%s no longer contains %q; update the planted bug", bug.file, bug.from)
		}
		d := newEmuDevice(t, map[string]string{bug.file: strings.Replace(raw, bug.from, bug.to, 1)})
		found := false
		for _, c := range kernelCases(rand.New(rand.NewPCG(1, 2))) {
			if c.name != bug.cases {
				continue
			}
			found = true
			want, err := c.ref(cpu.NewReference())
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.gpu(d)
			if err != nil {
				t.Logf("%s with the planted bug: %v", c.name, err)
				continue
			}
			if msg := compare(got, want, c.tol); msg == "" {
				t.Errorf("%s: the planted bug in %s (%q → %q) went unnoticed", c.name, bug.file, bug.from, bug.to)
			} else {
				t.Logf("%s with the planted bug: %s", c.name, msg)
			}
		}
		if !found {
			t.Fatalf("no case %s", bug.cases)
		}
	}
}
