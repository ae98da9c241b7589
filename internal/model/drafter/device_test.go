package drafter

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// The beam search run as one plan (searchOnDevice, what Metal runs) drafts
// the beams the host loop drafts: on the CPU reference backend, whose
// WarpLogSoftmax has the host's arithmetic, for the bundled head and a
// random one, from random contexts and init tokens, at several beam shapes.
// (The device sums scores in float32, the host in float64; the heads' beams
// have no near-ties for that to reorder.)
func TestSearchOnDeviceEqualsHostSearch(t *testing.T) {
	ck, err := llama.Open("../../../models/stories260K/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	runner, err := llama.Bind(ck.Model, cpu.NewReference())
	if err != nil {
		t.Fatal(err)
	}
	bundled, err := Load("../../../models/stories260K/drafter")
	if err != nil {
		t.Fatal(err)
	}
	defer bundled.Close()
	random := NewRandom(Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 2, RNN: false}, 3)
	r := rand.New(rand.NewPCG(11, 12))
	for _, head := range []*Head{bundled, random} {
		d, err := NewDrafter(head, runner)
		if err != nil {
			t.Fatal(err)
		}
		for trial := range 6 {
			w, l := []int{1, 2, 3, 4, 8, 50}[trial], []int{5, 4, 4, 3, 2, 3}[trial]
			h := make([]float32, head.Config.HiddenSize)
			for i := range h {
				h[i] = float32(r.NormFloat64())
			}
			init := int32(r.IntN(head.Config.VocabSize))
			d.onDevice = false
			want, err := d.BeamSearch(h, init, w, l, false)
			if err != nil {
				t.Fatal(err)
			}
			d.onDevice = true
			got, err := d.BeamSearch(h, init, w, l, false)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got.Tokens, want.Tokens, slices.Equal) {
				t.Errorf("head %d, W=%d L=%d: on device %v\non the host %v", head.Config.NumDraftLayers, w, l, got.Tokens, want.Tokens)
			}
		}
		d.Close()
	}
}
