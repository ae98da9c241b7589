package metal

import (
	"context"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	_ "github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

const stories = "../../../models/stories260K/stories260K.gguf"

// generateKV loads the demo model on a backend with a KV cache of type kv
// and decodes n tokens greedily. The end-to-end comparisons of ReDrafter on
// this backend, fake and emulated, are in tests/exact_test.go.
func generateKV(t *testing.T, backend, kv, prompt string, n int) []int32 {
	t.Helper()
	e, err := redrafter.Load(stories, redrafter.Options{Backend: backend, KVCache: kv})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	res, err := e.Generate(context.Background(), prompt, redrafter.GenerateOptions{MaxTokens: n}, nil)
	if err != nil {
		t.Fatalf("%s: %v", backend, err)
	}
	return res.Tokens
}

// TestGenerationMatchesCPU runs the engine on the Metal backend's encoder
// over the fake device (each dispatch group executed in reverse order by the
// CPU reference) and checks greedy decoding token for token against the CPU
// backend.
func TestGenerationMatchesCPU(t *testing.T) {
	var be *Backend
	graph.RegisterForTest(t, "metal-fake", func() (graph.Backend, error) {
		be = newReferenceFake(Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 4})
		return be, nil
	})
	const n = 48
	for _, kv := range []string{"f32", "f16"} {
		want := generateKV(t, "cpu", kv, "Once upon a time", n)
		got := generateKV(t, "metal-fake", kv, "Once upon a time", n)
		if !slices.Equal(got, want) {
			t.Errorf("%s KV cache: metal (fake device) generated %v\ncpu generated %v", kv, got, want)
		}
	}
	st := be.Stats()
	t.Logf("fake device: %+v", st)
	if st.Encodes >= st.Runs || st.Barriers == 0 || st.CommandBuffers <= st.Runs {
		t.Errorf("stats %+v: want plans reused, barriers, several command buffers per run", st)
	}
}
