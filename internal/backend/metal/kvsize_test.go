package metal

import (
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Llama 3.1 8B: 32 layers, 8 KV heads of 128, a 131072-token context.
const (
	llama8BLayers, llama8BKVHeads, llama8BHeadDim, llama8BContext = 32, 8, 128, 131072
	llama8BQ4Weights                                              = 4_920_000_000 // Q4_K_M, converted at load
)

func kvBytesPerToken(dt graph.DType) int64 {
	return int64(2 * llama8BLayers * llama8BKVHeads * llama8BHeadDim * dt.Size())
}

func fakeWithMemory(workingSet uint64, weights int64) *Backend {
	f := newReferenceDevice()
	f.inf = &DeviceInfo{Name: "fake", WorkingSet: workingSet, MaxBuffer: workingSet / 2, UnifiedMemory: true}
	b := newBackend(f, DefaultPolicy(*f.inf))
	b.hostBytes = weights
	return b
}

func TestKVContextLlama8B128k(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		name       string
		workingSet uint64 // recommendedMaxWorkingSetSize as macOS reports it: about 2/3 to 3/4 of RAM
		dt         graph.DType
		capped     bool
	}{
		{"16 GB Mac, f16", 11_453_251_584, graph.F16, true},
		{"24 GB Mac, f16", 16 * gib, graph.F16, true},
		{"36 GB Mac, f16", 27 * gib, graph.F16, false},
		{"36 GB Mac, f32", 27 * gib, graph.F32, true},
		{"64 GB Mac, f32", 48 * gib, graph.F32, false},
	} {
		be := fakeWithMemory(c.workingSet, llama8BQ4Weights)
		per := kvBytesPerToken(c.dt)
		ctx, err := be.KVContext(llama8BContext, per)
		if ctx <= 0 || ctx%kvRound != 0 || ctx > llama8BContext {
			t.Fatalf("%s: context %d (%v)", c.name, ctx, err)
		}
		// The stated budget: the cache, the weights and an eighth of the
		// working set for the rest fit in the working set.
		used := int64(ctx)*per + llama8BQ4Weights + int64(c.workingSet)/kvReserve
		if used > int64(c.workingSet) {
			t.Errorf("%s: %d tokens use %d bytes of a %d-byte working set", c.name, ctx, used, c.workingSet)
		}
		if capped := ctx < llama8BContext; capped != c.capped {
			t.Errorf("%s: context %d, capped %v, want %v", c.name, ctx, capped, c.capped)
		}
		if c.capped && (err == nil || !strings.Contains(err.Error(), "context capped at") || !strings.Contains(err.Error(), "131072 tokens")) {
			t.Errorf("%s: capped without a clear message: %v", c.name, err)
		}
		if !c.capped && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		// A capped context is as large as the budget allows, to the granule.
		if c.capped && used+kvRound*per <= int64(c.workingSet) {
			t.Errorf("%s: %d tokens leave room for %d more", c.name, ctx, kvRound)
		}
	}
}

func TestKVContextNoRoom(t *testing.T) {
	be := fakeWithMemory(5<<30, llama8BQ4Weights)
	ctx, err := be.KVContext(llama8BContext, kvBytesPerToken(graph.F16))
	if ctx != 0 || err == nil {
		t.Errorf("weights filling the working set: context %d, %v; want 0 and an error", ctx, err)
	}
}

func TestKVBudgetCountsWrappedWeights(t *testing.T) {
	be := fakeWithMemory(1<<30, 0)
	before := be.KVBudget()
	w, err := be.WrapHost(make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if got := be.KVBudget(); got != before-1<<20 {
		t.Errorf("budget %d after wrapping 1 MiB, want %d", got, before-1<<20)
	}
	be.Free(w)
	if got := be.KVBudget(); got != before {
		t.Errorf("budget %d after freeing the weights, want %d", got, before)
	}
	if be.DefaultKVCache() != graph.F16 {
		t.Errorf("default KV cache %v, want f16", be.DefaultKVCache())
	}
}
