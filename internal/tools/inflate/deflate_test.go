package inflate

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/tools/convert"
)

// Deflating an inflation gives back stories260K's weights: from the
// inflated GGUF, and from an HF checkpoint of it (query and key rows in
// NeoX order), to within the rounding of the norm and query rescaling.
func TestDeflateUndoesInflate(t *testing.T) {
	for _, s := range shapes {
		t.Run(fmt.Sprintf("dim%d_h%d_kv%d_l%d_ffn%d", s.Dim, s.Heads, s.KVHeads, s.Layers, s.FFN), func(t *testing.T) {
			dir := t.TempDir()
			big := filepath.Join(dir, "big.gguf")
			if _, err := Model(stories, big, s, Options{DType: graph.F32, Seed: 3}); err != nil {
				t.Fatal(err)
			}
			hf := filepath.Join(dir, "big-hf")
			if _, err := convert.Model(big, hf, convert.Options{Bits: 32}); err != nil {
				t.Fatal(err)
			}
			for _, from := range []string{big, hf} {
				out := filepath.Join(dir, "small.gguf")
				if err := Deflate(from, stories, out); err != nil {
					t.Fatalf("%s: %v", filepath.Base(from), err)
				}
				if worst, name := maxWeightErr(t, stories, out); worst > 1e-6 {
					t.Errorf("from %s: %s differs from the original by %.3g relative", filepath.Base(from), name, worst)
				}
			}
		})
	}
}

// maxWeightErr compares every weight of two models of one shape.
func maxWeightErr(t *testing.T, a, b string) (float64, string) {
	ca, err := llama.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := llama.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	wa, wb := weightsOf(ca.Model), weightsOf(cb.Model)
	if len(wa) != len(wb) {
		t.Fatalf("%d weights against %d", len(wa), len(wb))
	}
	worst, at := 0.0, ""
	for i := range wa {
		x, y := values(wa[i]), values(wb[i])
		if len(x) != len(y) || wa[i].Name != wb[i].Name {
			t.Fatalf("weight %d: %s %v against %s %v", i, wa[i].Name, wa[i].Shape, wb[i].Name, wb[i].Shape)
		}
		big, diff := 0.0, 0.0
		for j := range x {
			big = math.Max(big, math.Abs(float64(x[j])))
			diff = math.Max(diff, math.Abs(float64(x[j])-float64(y[j])))
		}
		if e := diff / math.Max(big, 1e-30); e > worst {
			worst, at = e, wa[i].Name
		}
	}
	return worst, at
}

// weightsOf lists a model's weights in a fixed order.
func weightsOf(m *llama.Model) []llama.Weight {
	ws := []llama.Weight{m.Embed, m.Norm}
	if !m.Config.TiedOutput {
		ws = append(ws, m.Output)
	}
	for _, l := range m.Layers {
		ws = append(ws, l.AttnNorm, l.Q, l.K, l.V, l.O, l.FFNNorm, l.Gate, l.Up, l.Down)
	}
	return ws
}
