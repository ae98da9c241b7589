package llamatest

import (
	"fmt"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// WriteMistralGGUF draws a Mistral-shaped model of shape s (s.Arch is
// ignored) with a sliding window of window positions from seed and writes
// it as dir/model.gguf under llama.cpp's names and keys, in float32, with
// meta added after the architecture's keys; it returns the file. The
// weights are random, so the row permutation llama.cpp applies to q and k
// when it converts an HF checkpoint is moot: the file is its own model.
func WriteMistralGGUF(dir string, s Spec, window int, meta []formats.KV, seed uint64) (string, error) {
	t := newTensors(seed, 0x5157)
	add := func(name string, scale float64, shape ...int) { t.add(name, "", scale, shape...) }
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
	kvs := append(commonKVs("mistral", s), formats.KV{Key: a + "attention.sliding_window", Value: uint32(window)})
	kvs = append(kvs, meta...)
	path := filepath.Join(dir, "model.gguf")
	if err := writeGGUF(path, kvs, t); err != nil {
		return "", err
	}
	return path, nil
}
