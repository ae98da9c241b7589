package llamatest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// WriteMistralGGUF draws a Mistral-shaped model of shape s (s.Arch is
// ignored) with a sliding window of window positions from seed and writes
// it as dir/model.gguf under llama.cpp's names and keys, in float32, with
// meta added after the architecture's keys; it returns the file. The
// weights are random, so the row permutation llama.cpp applies to q and k
// when it converts an HF checkpoint is moot: the file is its own model.
func WriteMistralGGUF(dir string, s Spec, window int, meta []formats.KV, seed uint64) (string, error) {
	r := rand.New(rand.NewPCG(seed, 0x5157))
	var ts []formats.Tensor
	add := func(name string, scale float64, shape ...int) {
		v := make([]float32, graph.Shape(shape).Numel())
		for i := range v {
			x := r.NormFloat64() * scale
			if len(shape) == 1 {
				x += 1 // norm gains near 1
			}
			v[i] = float32(x)
		}
		ts = append(ts, formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: graph.AsBytes(v)})
	}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	add("token_embd.weight", 1, s.Vocab, s.Dim)
	add("output_norm.weight", 0.1, s.Dim)
	add("output.weight", 0.5, s.Vocab, s.Dim)
	for l := range s.Layers {
		g := fmt.Sprintf("blk.%d.", l)
		add(g+"attn_norm.weight", 0.1, s.Dim)
		add(g+"attn_q.weight", 0.3, q, s.Dim)
		add(g+"attn_k.weight", 0.3, kv, s.Dim)
		add(g+"attn_v.weight", 0.3, kv, s.Dim)
		add(g+"attn_output.weight", 0.3, s.Dim, q)
		add(g+"ffn_norm.weight", 0.1, s.Dim)
		add(g+"ffn_gate.weight", 0.3, s.FFN, s.Dim)
		add(g+"ffn_up.weight", 0.3, s.FFN, s.Dim)
		add(g+"ffn_down.weight", 0.3, s.Dim, s.FFN)
	}
	a := "mistral."
	kvs := []formats.KV{
		{Key: "general.architecture", Value: "mistral"},
		{Key: a + "context_length", Value: uint32(s.Context)},
		{Key: a + "embedding_length", Value: uint32(s.Dim)},
		{Key: a + "feed_forward_length", Value: uint32(s.FFN)},
		{Key: a + "block_count", Value: uint32(s.Layers)},
		{Key: a + "attention.head_count", Value: uint32(s.Heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(s.KVHeads)},
		{Key: a + "attention.key_length", Value: uint32(s.HeadDim)},
		{Key: a + "attention.value_length", Value: uint32(s.HeadDim)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: s.NormEps},
		{Key: a + "attention.sliding_window", Value: uint32(window)},
		{Key: a + "rope.freq_base", Value: float32(s.RopeTheta)},
	}
	kvs = append(kvs, meta...)
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, kvs, ts, 32); err != nil {
		return "", fmt.Errorf("llamatest: %w", err)
	}
	path := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("llamatest: %w", err)
	}
	return path, nil
}
