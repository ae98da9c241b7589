package tests

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/graph"
)

// One ReDrafter step on Metal's fake device waits for the device twice:
// once for the beam search (every draft, with its top-50 warp, log-softmax
// and global top-W, in one plan) and once for verification; a step whose
// accepted path is not the tree's first branch waits once more for the KV
// compaction. (The goal, one wait per step, needs packing, acceptance and
// compaction on the device too.) The figures are logged for
// docs/BENCHMARKS.md.
func TestReDrafterStepWaitsOnFakeDevice(t *testing.T) {
	for _, c := range []struct{ w, l int }{{1, 5}, {2, 4}, {3, 4}} {
		res := generate(t, "metal-fake", "f32", storiesHead, c.w, c.l, "Once upon a time", 48)
		st := res.Stats.Draft
		if st == nil || st.Steps == 0 {
			t.Fatalf("W=%d L=%d: no ReDrafter steps: %+v", c.w, c.l, res.Stats)
		}
		waits, dispatches, cbs := st.PerStep()
		t.Logf("W=%d L=%d: %d steps, %.2f waits, %.2f command buffers, %.1f dispatches per step",
			c.w, c.l, st.Steps, waits, cbs, dispatches)
		d := st.Device
		// W=1 beams are a chain: the accepted path is always a prefix, so no
		// step compacts the cache.
		lo, hi := 2*st.Steps, 3*st.Steps
		if c.w == 1 {
			hi = lo
		}
		if d.Waits < lo || d.Waits > hi {
			t.Errorf("W=%d L=%d: %d host waits in %d steps, want %d..%d", c.w, c.l, d.Waits, st.Steps, lo, hi)
		}
		if d.CommandBuffers < d.Waits || d.Dispatches < d.CommandBuffers {
			t.Errorf("W=%d L=%d: counts %+v: each wait needs a command buffer, each command buffer a dispatch", c.w, c.l, d)
		}
	}
	// The CPU counts nothing: it never waits for a device.
	res := generate(t, "cpu", "f32", storiesHead, 3, 4, "Once upon a time", 16)
	if d := res.Stats.Draft.Device; d != (graph.Counts{}) {
		t.Errorf("cpu: device counts %+v, want none", d)
	}
}
