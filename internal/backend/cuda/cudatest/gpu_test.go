//go:build cuda && linux

package cudatest

import (
	"bytes"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudacheck"
)

// openGPU opens GPU 0 through the real driver, or skips: these tests are
// what a machine with an NVIDIA GPU adds to the emulated ones (a -tags
// cuda test binary run there; docs/CUDA.md, "On a real GPU").
func openGPU(t *testing.T) *cuda.Backend {
	t.Helper()
	be, err := cuda.Open()
	if err != nil {
		t.Skipf("SKIPPED, NOT PASSED: no GPU to run on: %v", err)
	}
	return be
}

// TestSelfTestOnGPU: every kernel, run once on the GPU on fresh random
// inputs, agrees with the CPU reference.
func TestSelfTestOnGPU(t *testing.T) {
	be := openGPU(t)
	defer be.Close()
	vs, err := cudacheck.SelfTest(be, cpu.NewReference(), 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	ok := cudacheck.Write(&buf, be.Device(), vs)
	t.Logf("\n%s", buf.String())
	if !ok {
		t.Error("self-test failed on the GPU")
	}
}

// TestGreedyGenerationEqualsCPUOnGPU is TestGreedyGenerationEqualsCPU on
// the real GPU: greedy decoding and greedy ReDrafter there equal greedy
// decoding on the CPU token for token, one wait per ReDrafter step.
func TestGreedyGenerationEqualsCPUOnGPU(t *testing.T) {
	openGPU(t).Close()
	checkGreedyEqualsCPU(t, "cuda", true)
}

// TestQwen3GreedyGenerationEqualsCPUOnGPU is TestQwen3GreedyGenerationEqualsCPU
// on the real GPU, at both beam shapes.
func TestQwen3GreedyGenerationEqualsCPUOnGPU(t *testing.T) {
	openGPU(t).Close()
	checkArchGreedyEqualsCPU(t, "cuda", qwen3Spec, [][2]int{{3, 4}, {1, 5}})
}

// TestGemma3GreedyGenerationEqualsCPUOnGPU is TestGemma3GreedyGenerationEqualsCPU
// on the real GPU, at both beam shapes.
func TestGemma3GreedyGenerationEqualsCPUOnGPU(t *testing.T) {
	openGPU(t).Close()
	checkGemma3GreedyEqualsCPU(t, "cuda", [][2]int{{3, 4}, {1, 5}})
}

// TestGemma2GreedyGenerationEqualsCPUOnGPU is TestGemma2GreedyGenerationEqualsCPU
// on the real GPU, at both beam shapes.
func TestGemma2GreedyGenerationEqualsCPUOnGPU(t *testing.T) {
	openGPU(t).Close()
	checkGemma2GreedyEqualsCPU(t, "cuda", [][2]int{{3, 4}, {1, 5}})
}

// TestPhi3GreedyGenerationEqualsCPUOnGPU is TestPhi3GreedyGenerationEqualsCPU
// on the real GPU, at both beam shapes.
func TestPhi3GreedyGenerationEqualsCPUOnGPU(t *testing.T) {
	openGPU(t).Close()
	checkArchGreedyEqualsCPU(t, "cuda", phi3Spec, [][2]int{{3, 4}, {1, 5}})
}
