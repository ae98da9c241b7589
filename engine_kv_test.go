package redrafter

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// The KV cache a session gets unless told: f16 on the Metal GPU (half the
// memory, half the bytes attention reads), f32 on the CPU; an explicit
// choice wins on both.
func TestDefaultKVCacheByBackend(t *testing.T) {
	graph.RegisterForTest(t, "metal-fake-kv", func() (graph.Backend, error) {
		return metal.NewFake(metal.Policy{FirstCommit: 4, OpsPerBuffer: 16}, metal.Fake{Reference: cpu.NewReference()}), nil
	})
	for _, c := range []struct{ backend, kv, want string }{
		{"cpu", "", "f32"}, {"metal-fake-kv", "", "f16"}, {"metal-fake-kv", "f32", "f32"}, {"cpu", "f16", "f16"},
	} {
		e, err := Load(stories, Options{Backend: c.backend, KVCache: c.kv})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Model().KVCache; got != c.want {
			t.Errorf("%s with KVCache %q: %s, want %s", c.backend, c.kv, got, c.want)
		}
		if e.Context() != e.Model().TrainedContext {
			t.Errorf("%s: context %d, want the model's %d (a small model fits)", c.backend, e.Context(), e.Model().TrainedContext)
		}
		e.Close()
	}
}
