package llama

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// phi3Spec is a tiny Phi-3: GQA (Phi-4's layout; Phi-3-mini has as many
// kv heads as heads), untied output.
var phi3Spec = llamatest.Spec{Arch: "phi3", Vocab: 64, Dim: 48, FFN: 80, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 12,
	NormEps: 1e-5, RopeTheta: 10000, Context: 64}

func writePhi3(t *testing.T) *llamatest.Checkpoint {
	t.Helper()
	ck, err := llamatest.Write(t.TempDir(), phi3Spec, nil, 7)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

func phi3Config() Config {
	s := phi3Spec
	return Config{Arch: "phi3", Vocab: s.Vocab, Dim: s.Dim, FFN: s.FFN, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads,
		HeadDim: s.HeadDim, NormEps: s.NormEps, RopeTheta: s.RopeTheta, RopeDims: s.HeadDim, RopeNeoX: true, Context: s.Context}
}

// phi3Forward is an independent float64 forward pass of a Phi-3, written
// from transformers' src/transformers/models/phi3/modeling_phi3.py
// (v4.48): Phi3Attention projects with the fused qkv_proj and takes q, k
// and v as consecutive row ranges; RoPE is rotate_half over each head's
// first rotary_dim = RopeDims dimensions (partial_rotary_factor; the rest
// pass through), with cos and sin multiplied by the attention factor
// (Phi3RotaryEmbedding's attention_scaling); Phi3MLP chunks gate_up_proj's
// output in two, up_states * silu(gate); RMSNorm before each block and at
// the end; lm_head untied; with a sliding window, query q sees key k iff
// q - window < k <= q (masking_utils' sliding_window_overlay). It reads
// the fused weights as stored. See phi3ForwardRope for the rope arguments.
func phi3Forward(c Config, w map[string][]float64, tokens []int) [][]float64 {
	return phi3ForwardRope(c, w, tokens, nil, 1)
}

// phi3ForwardRope is phi3Forward with longrope's factors (ext: one divisor
// per rotated pair, as _compute_longrope_parameters: inv_freq[j] =
// 1 / (ext[j] · base^(2j/rotary_dim)); nil for none) and attention factor.
func phi3ForwardRope(c Config, w map[string][]float64, tokens []int, ext []float64, attn float64) [][]float64 {
	d, hd, nq, nkv := c.Dim, c.HeadDim, c.Heads, c.KVHeads
	matvec := func(x []float64, name string) []float64 {
		m := w[name]
		out := make([]float64, len(m)/len(x))
		for o := range out {
			for i, v := range x {
				out[o] += m[o*len(x)+i] * v
			}
		}
		return out
	}
	rms := func(x []float64, name string) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+float64(c.NormEps))
		y := make([]float64, len(x))
		for i := range x {
			y[i] = w[name][i] * (x[i] * inv)
		}
		return y
	}
	rot := c.RopeDims // q_rot, q_pass = q[..., :rot], q[..., rot:]
	rotate := func(h []float64, pos int) {
		for j := range rot / 2 {
			inv := 1 / math.Pow(c.RopeTheta, float64(2*j)/float64(rot))
			if ext != nil {
				inv = 1 / (ext[j] * math.Pow(c.RopeTheta, float64(2*j)/float64(rot)))
			}
			ang := float64(pos) * inv
			cs, sn := math.Cos(ang)*attn, math.Sin(ang)*attn
			a, b := h[j], h[j+rot/2]
			h[j], h[j+rot/2] = a*cs-b*sn, b*cs+a*sn
		}
	}
	n := len(tokens)
	hs := make([][]float64, n)
	for t, tok := range tokens {
		hs[t] = slices.Clone(w["model.embed_tokens.weight"][tok*d : (tok+1)*d])
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		ks, vs := make([][]float64, n), make([][]float64, n)
		qs := make([][]float64, n)
		for t := range n {
			qkv := matvec(rms(hs[t], p+"input_layernorm.weight"), p+"self_attn.qkv_proj.weight")
			qs[t], ks[t], vs[t] = qkv[:nq*hd], qkv[nq*hd:(nq+nkv)*hd], qkv[(nq+nkv)*hd:]
			for h := range nq {
				rotate(qs[t][h*hd:(h+1)*hd], t)
			}
			for h := range nkv {
				rotate(ks[t][h*hd:(h+1)*hd], t)
			}
		}
		for t := range n {
			att := make([]float64, nq*hd)
			for h := range nq {
				kh := h / (nq / nkv)
				sc := make([]float64, t+1)
				top := math.Inf(-1)
				for s := range t + 1 {
					if c.SlidingWindow > 0 && s <= t-c.SlidingWindow {
						sc[s] = math.Inf(-1) // outside the window
						continue
					}
					for j := range hd {
						sc[s] += qs[t][h*hd+j] * ks[s][kh*hd+j]
					}
					sc[s] /= math.Sqrt(float64(hd))
					top = math.Max(top, sc[s])
				}
				var sum float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - top)
					sum += sc[s]
				}
				for s := range sc {
					for j := range hd {
						att[h*hd+j] += sc[s] / sum * vs[s][kh*hd+j]
					}
				}
			}
			o := matvec(att, p+"self_attn.o_proj.weight")
			for i := range hs[t] {
				hs[t][i] += o[i]
			}
			gu := matvec(rms(hs[t], p+"post_attention_layernorm.weight"), p+"mlp.gate_up_proj.weight")
			gate, up := gu[:c.FFN], gu[c.FFN:]
			act := make([]float64, c.FFN)
			for i := range act {
				act[i] = up[i] * gate[i] / (1 + math.Exp(-gate[i]))
			}
			down := matvec(act, p+"mlp.down_proj.weight")
			for i := range hs[t] {
				hs[t][i] += down[i]
			}
		}
	}
	out := make([][]float64, n)
	for t := range n {
		out[t] = matvec(rms(hs[t], "model.norm.weight"), "lm_head.weight")
	}
	return out
}

// A random Phi-3 loads from GGUF and from an HF checkpoint with the same
// config (its fused qkv and gate_up tensors split into row views), and
// both give phi3Forward's logits within 1e-5 of the largest logit, on both
// CPU backends; the two files' logits are the same bits; greedy decoding
// gives the reference's tokens.
func TestPhi3MatchesReference(t *testing.T) {
	ck := writePhi3(t)
	c := phi3Config()
	tokens := []int32{3, 17, 5, 63, 0, 22, 8, 41}
	ints := make([]int, len(tokens))
	for i, v := range tokens {
		ints[i] = int(v)
	}
	want := phi3Forward(c, ck.Weights, ints)
	prompt, n := []int32{7, 30, 2}, 24
	var wantTokens []int32
	seq := []int{7, 30, 2}
	for range n {
		rows := phi3Forward(c, ck.Weights, seq)
		last := rows[len(rows)-1]
		best := 0
		for i, v := range last {
			if v > last[best] {
				best = i
			}
		}
		wantTokens = append(wantTokens, int32(best))
		seq = append(seq, best)
	}
	checkMatchesReference(t, ck, c, tokens, want, prompt, wantTokens)
}

// A phi3 GGUF whose fused tensors are quantized (Q8_0, Q4_0 and Q4_K become
// affine weights, Q6_K stays blocks) splits them by rows with their scales
// and biases: its logits on the reference backend equal those of the same
// file with every quantized tensor stored as its float32 values.
func TestPhi3QuantizedFusedSplit(t *testing.T) {
	spec := llamatest.Spec{Arch: "phi3", Vocab: 32, Dim: 256, FFN: 64, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 64,
		NormEps: 1e-5, RopeTheta: 10000, Context: 32}
	ck, err := llamatest.Write(t.TempDir(), spec, nil, 5)
	if err != nil {
		t.Fatal(err)
	}
	g, err := formats.OpenGGUF(ck.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	r := rand.New(rand.NewPCG(3, 3))
	for _, typ := range []formats.DType{formats.Q8_0, formats.Q4_0, formats.Q4_K, formats.Q6_K} {
		qt, _ := quant.ParseGGML(typ.String())
		var qs, ds []formats.Tensor
		for _, tn := range g.Tensors {
			if len(tn.Shape) != 2 || tn.Shape[1]%qt.BlockElems() != 0 {
				qs, ds = append(qs, tn), append(ds, tn)
				continue
			}
			n := tn.Shape[0] * tn.Shape[1]
			data := make([]byte, n/qt.BlockElems()*qt.BlockBytes())
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			at := map[formats.DType][]int{formats.Q8_0: {0}, formats.Q4_0: {0}, formats.Q4_K: {0, 2}, formats.Q6_K: {208}}[typ]
			for off := 0; off < len(data); off += qt.BlockBytes() {
				for _, a := range at {
					binary.LittleEndian.PutUint16(data[off+a:], quant.F32ToF16(float32(r.Float64()*0.01)))
				}
			}
			v := make([]float32, n)
			quant.DequantizeGGML(qt, v, data)
			qs = append(qs, formats.Tensor{Name: tn.Name, DType: typ, Shape: tn.Shape, Data: data})
			ds = append(ds, formats.Tensor{Name: tn.Name, DType: formats.F32, Shape: tn.Shape, Data: graph.AsBytes(v)})
		}
		dir := t.TempDir()
		write := func(name string, ts []formats.Tensor) string {
			var buf bytes.Buffer
			if err := formats.WriteGGUF(&buf, g.KVs(), ts, 32); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		qp, dp := write("q.gguf", qs), write("d.gguf", ds)
		tokens := []int32{1, 5, 9, 30}
		ref := cpu.NewReference()
		if ql, dl := logitsOfTokens(t, qp, ref, tokens), logitsOfTokens(t, dp, ref, tokens); !equalF32(ql, dl) {
			t.Errorf("%v: logits differ from the dequantized f32 file (max rel %g)", typ, maxRel(ql, dl))
		}
	}
}
