package redrafter

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// ggufBlocks rewrites the f32 GGUF at path with every matrix quantized
// (quant.QuantizeGGML) to the next of types in turn.
func ggufBlocks(t testing.TB, path string, types []quant.GGML) string {
	t.Helper()
	g, err := formats.OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var ts []formats.Tensor
	i := 0
	for _, tn := range g.Tensors {
		if len(tn.Shape) == 2 {
			v, err := tn.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			typ := types[i%len(types)]
			i++
			if tn.Data, err = quant.QuantizeGGML(typ, v); err != nil {
				t.Fatal(err)
			}
			tn.DType, _ = formats.ParseDType(typ.String())
		}
		ts = append(ts, tn)
	}
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, g.KVs(), ts, 32); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "blocks.gguf")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// A model whose matrices are every ggml format we read: greedy ReDrafter
// equals greedy decoding on the CPU, which runs the blocks natively, and on
// Metal's fake device, which has no block kernels and gets the weights
// converted exactly; there the tokens equal the CPU reference's on the
// blocks bit for bit (the same values, the same arithmetic).
func TestBlockFormatsGreedy(t *testing.T) {
	graph.RegisterForTest(t, "metal-fake-blocks", func() (graph.Backend, error) {
		return metal.NewFake(metal.Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 4}, metal.Fake{Reference: cpu.NewReference()}), nil
	})
	graph.RegisterForTest(t, "cpu-ref-blocks", func() (graph.Backend, error) { return cpu.NewReference(), nil })
	path := ggufBlocks(t, randomModel(t, 256, 2, 4, 2, 512, 33), []quant.GGML{quant.Q6_K, quant.Q5_K, quant.Q3_K,
		quant.Q2_K, quant.IQ4_XS, quant.Q5_0, quant.Q5_1, quant.IQ4_NL, quant.Q4_1})
	tokens := map[string]map[string][]int32{}
	for _, be := range []string{"cpu", "cpu-ref-blocks", "metal-fake-blocks"} {
		e, err := Load(path, Options{Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		randomHead(t, e, true, 1, 0, 34)
		if be == "cpu-ref-blocks" {
			tokens[be] = map[string][]int32{}
			for _, p := range specPrompts {
				res, err := e.Generate(context.Background(), p, GenerateOptions{MaxTokens: 24, Draft: DraftOptions{Off: true}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				tokens[be][p] = res.Tokens
			}
			continue
		}
		start := time.Now()
		// The fake device runs every dispatch by the reference: one beam shape.
		widths, lengths := []int{1, 4}, []int{2, 5}
		if be != "cpu" {
			widths, lengths = []int{2}, []int{3}
		}
		tokens[be], _, _ = checkGreedyEqual(t, e, be, 24, widths, lengths)
		t.Logf("%s: %v", be, time.Since(start))
	}
	for _, p := range specPrompts {
		if got, want := tokens["metal-fake-blocks"][p], tokens["cpu-ref-blocks"][p]; !slices.Equal(got, want) {
			t.Errorf("prompt %q: Metal (converted) %v, the CPU reference on the blocks %v", p, got, want)
		}
	}
}
