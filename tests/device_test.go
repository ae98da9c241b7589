package tests

import (
	"fmt"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// The fake device with Metal's default policy (first command buffer after
// 10 dispatches, then every 40), for the command buffer counts a Mac would
// see; "metal-fake" has the tests' small policy.
func init() {
	graph.Register("metal-fake-default", func() (graph.Backend, error) {
		return metal.NewFake(metal.DefaultPolicy(metal.DeviceInfo{}), metal.Fake{Reference: cpu.NewReference()}), nil
	})
}

// One greedy ReDrafter step on Metal's fake device waits for the device
// once: the beam search, the beams laid out as the verification batch,
// verification, acceptance and the KV compaction are one plan
// (drafter.DeviceStep). Each wait needs a command buffer and each command
// buffer a dispatch. The figures are logged for docs/BENCHMARKS.md, with
// the tests' policy and the default one.
func TestReDrafterStepWaitsOnFakeDevice(t *testing.T) {
	for _, be := range []string{"metal-fake", "metal-fake-default"} {
		for _, c := range []struct{ w, l int }{{1, 5}, {2, 4}, {3, 4}, {4, 5}} {
			res := generate(t, be, "f32", storiesHead, c.w, c.l, "Once upon a time", 48)
			st := res.Stats.Draft
			if st == nil || st.Steps == 0 {
				t.Fatalf("%s W=%d L=%d: no ReDrafter steps: %+v", be, c.w, c.l, res.Stats)
			}
			logSteps(t, be, c.w, c.l, st)
			d := st.Device
			if d.Waits != st.Steps {
				t.Errorf("%s W=%d L=%d: %d host waits in %d steps, want one per step", be, c.w, c.l, d.Waits, st.Steps)
			}
			if d.CommandBuffers < d.Waits || d.Dispatches < d.CommandBuffers {
				t.Errorf("%s W=%d L=%d: counts %+v: each wait needs a command buffer, each command buffer a dispatch", be, c.w, c.l, d)
			}
		}
	}
	// The CPU counts nothing: it never waits for a device.
	res := generate(t, "cpu", "f32", storiesHead, 3, 4, "Once upon a time", 16)
	if d := res.Stats.Draft.Device; d != (redrafter.DeviceCounts{}) {
		t.Errorf("cpu: device counts %+v, want none", d)
	}
}

func logSteps(t *testing.T, be string, w, l int, st *redrafter.DraftStats) {
	waits, dispatches, cbs := st.PerStep()
	t.Logf("%s W=%d L=%d: %d steps, %.2f tokens per step, %.2f waits, %.2f command buffers, %.1f dispatches per step",
		be, w, l, st.Steps, st.TokensPerStep(), waits, cbs, dispatches)
}

// Greedy ReDrafter through the one-plan step equals greedy autoregressive
// decoding on the CPU, token for token, on the fake device (each dispatch
// run by the CPU reference) and with every dispatch run by its emulated
// kernel, at W ∈ {1, 2, 4} and L ∈ {3, 5}, with the bundled head, and both
// KV cache types on the fake device. The bundled head must get drafts
// accepted, so that the beams the device lays out are the searched ones
// (wrong beams would still decode exactly, only slower). Emulation decodes
// 12 tokens per shape, at W1L3 and W4L5 under make test (every shape
// under make test-all, REDRAFTER_TEST_FULL); -short skips it.
func TestGreedyDeviceStepEqualsAutoregressive(t *testing.T) {
	t.Parallel()
	const n, emuTokens = 40, 12
	prompt := "Once upon a time"
	shapes := [][2]int{{1, 3}, {1, 5}, {2, 3}, {2, 5}, {4, 3}, {4, 5}}
	for _, kv := range []string{"f32", "f16"} {
		want := generate(t, "cpu", kv, "", 0, 0, prompt, n).Tokens
		for _, be := range []struct {
			name string
			n    int
		}{{"metal-fake", n}, {"metal-emu", emuTokens}} {
			if be.name == "metal-emu" && kv == "f16" {
				continue // the f16 kernels' exactness is TestGreedyReDrafterEqualsAutoregressiveOnEveryBackend's
			}
			t.Run(be.name+"/"+kv, func(t *testing.T) {
				backend := be.name
				if be.name == "metal-emu" {
					if testing.Short() {
						t.Skip("emulated dispatches take minutes")
					}
					backend = emulated(t)
				}
				run := shapes
				if be.name == "metal-emu" {
					// make test: the shortest and the widest and longest
					// beam; make test-all: all six.
					run = testenv.Subset(shapes, 0, 5)
				}
				for _, s := range run {
					t.Run(fmt.Sprintf("W%dL%d", s[0], s[1]), func(t *testing.T) {
						res := generate(t, backend, kv, storiesHead, s[0], s[1], prompt, be.n)
						if !slices.Equal(res.Tokens, want[:be.n]) {
							t.Errorf("ReDrafter: %v\nautoregressive on the cpu: %v", res.Tokens, want[:be.n])
						}
						st := res.Stats.Draft
						logSteps(t, be.name, s[0], s[1], st)
						if st.Device.Waits != st.Steps {
							t.Errorf("%d host waits in %d steps, want one per step", st.Device.Waits, st.Steps)
						}
						if st.TokensPerStep() < 1.5 {
							t.Errorf("the bundled head emitted %.2f tokens per step, want >= 1.5", st.TokensPerStep())
						}
					})
				}
			})
		}
	}
}
