package llama

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Weight is one tensor of a checkpoint, viewed in place where possible.
type Weight struct {
	Name  string // as named in the checkpoint
	DType graph.DType
	Shape graph.Shape // row-major, outermost first; a Linear is [out, in]
	Data  []byte      // nil for an absent optional weight
	// Quant is set for an affine-quantized weight: DType is U32, Data the
	// packed codes and Shape the logical shape (see Quant).
	Quant *Quant
	// Blocks is set for a GGUF block-quantized weight kept as the file
	// stores it (see ggmlWeight): DType is U8, Data the blocks, row after
	// row, and Shape the logical shape.
	Blocks quant.GGML
	// Owned marks Data made at load (GGUF blocks converted) that only the
	// backend reads once the model is bound: Binding.Add hands it over
	// (graph.Adopter). The embedding and output projection are never
	// owned: the draft-head trainer reads them on the host.
	Owned bool
}

// Present reports whether the checkpoint had this weight.
func (w Weight) Present() bool { return w.Data != nil }

// Model holds the weights of a Llama-family model. Field tags name each
// weight in HF safetensors (st) and GGUF (gguf) checkpoints; binding reads
// them, so the names in this file are the whole mapping.
type Model struct {
	Config Config
	Embed  Weight  `st:"model.embed_tokens.weight" gguf:"token_embd.weight"` // [vocab, dim]
	Norm   Weight  `st:"model.norm.weight" gguf:"output_norm.weight"`        // [dim]
	Output Weight  `st:"lm_head.weight" gguf:"output.weight" tied:"Embed"`   // [vocab, dim]
	Layers []Layer `st:"model.layers.%d." gguf:"blk.%d."`
}

// Layer is one transformer block.
type Layer struct {
	AttnNorm Weight `st:"input_layernorm.weight" gguf:"attn_norm.weight"`                                                         // [dim]
	Q        Weight `st:"self_attn.q_proj.weight" gguf:"attn_q.weight"`                                                           // [heads*headDim, dim]
	K        Weight `st:"self_attn.k_proj.weight" gguf:"attn_k.weight"`                                                           // [kvHeads*headDim, dim]
	V        Weight `st:"self_attn.v_proj.weight" gguf:"attn_v.weight"`                                                           // [kvHeads*headDim, dim]
	O        Weight `st:"self_attn.o_proj.weight" gguf:"attn_output.weight"`                                                      // [dim, heads*headDim]
	QBias    Weight `st:"self_attn.q_proj.bias" gguf:"attn_q.bias" opt:"bias"`                                                    // [heads*headDim]
	KBias    Weight `st:"self_attn.k_proj.bias" gguf:"attn_k.bias" opt:"bias"`                                                    // [kvHeads*headDim]
	VBias    Weight `st:"self_attn.v_proj.bias" gguf:"attn_v.bias" opt:"bias"`                                                    // [kvHeads*headDim]
	FFNNorm  Weight `st:"post_attention_layernorm.weight" gguf:"ffn_norm.weight" st_postnorms:"pre_feedforward_layernorm.weight"` // [dim]
	Gate     Weight `st:"mlp.gate_proj.weight" gguf:"ffn_gate.weight"`                                                            // [ffn, dim]
	Up       Weight `st:"mlp.up_proj.weight" gguf:"ffn_up.weight"`                                                                // [ffn, dim]
	Down     Weight `st:"mlp.down_proj.weight" gguf:"ffn_down.weight"`                                                            // [dim, ffn]

	// Qwen3 (Config.QKNorm): RMSNorm gains over each head of q and of k,
	// one vector shared by the heads.
	QNorm Weight `st:"self_attn.q_norm.weight" gguf:"attn_q_norm.weight" opt:"qknorm"` // [headDim]
	KNorm Weight `st:"self_attn.k_norm.weight" gguf:"attn_k_norm.weight" opt:"qknorm"` // [headDim]

	// Gemma (Config.PostNorms): RMSNorm gains of the attention's output
	// and of the MLP's, applied before each joins the residual stream.
	// Gemma's HF checkpoints call the attention's post_attention_layernorm
	// and the MLP's input norm (FFNNorm) pre_feedforward_layernorm: the
	// st_postnorms tag is FFNNorm's HF name in a model with PostNorms.
	PostAttnNorm Weight `st:"post_attention_layernorm.weight" gguf:"post_attention_norm.weight" opt:"postnorms"` // [dim]
	PostFFNNorm  Weight `st:"post_feedforward_layernorm.weight" gguf:"post_ffw_norm.weight" opt:"postnorms"`     // [dim]
}

// expected returns the shape a weight must have under c.
func (c *Config) expected(field string) graph.Shape {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	switch field {
	case "Embed", "Output":
		return graph.Shape{c.Vocab, c.Dim}
	case "Norm", "AttnNorm", "FFNNorm", "PostAttnNorm", "PostFFNNorm":
		return graph.Shape{c.Dim}
	case "Q":
		return graph.Shape{q, c.Dim}
	case "K", "V":
		return graph.Shape{kv, c.Dim}
	case "O":
		return graph.Shape{c.Dim, q}
	case "QBias":
		return graph.Shape{q}
	case "KBias", "VBias":
		return graph.Shape{kv}
	case "QNorm", "KNorm":
		return graph.Shape{c.HeadDim}
	case "Gate", "Up":
		return graph.Shape{c.FFN, c.Dim}
	case "Down":
		return graph.Shape{c.Dim, c.FFN}
	}
	panic("llama: no shape for " + field)
}

// lookup finds a tensor by checkpoint name.
type lookup func(name string) (Weight, bool)

// bindWeights fills m's weights from a checkpoint, using the tag key (st or
// gguf) for names, as rename maps them to the checkpoint's (nil: as they
// are), and checks every shape against the config.
func bindWeights(m *Model, tag string, rename func(string) string, find lookup) error {
	c := &m.Config
	if rename == nil {
		rename = func(name string) string { return name }
	}
	// Layers are bound one at a time, so a config that claims more layers
	// than the file holds fails at the first missing tensor, before its
	// count is ever allocated.
	m.Layers = nil
	bind := func(v reflect.Value, t reflect.StructField, prefix string) error {
		name := prefix + t.Tag.Get(tag)
		if t.Tag.Get("opt") == "postnorms" && !c.PostNorms {
			return nil // a Llama's post_attention_layernorm is its FFNNorm
		}
		if hf := t.Tag.Get("st_postnorms"); hf != "" && tag == "st" && c.PostNorms {
			name = prefix + hf
		}
		name = rename(name)
		w, ok := find(name)
		if !ok {
			if t.Tag.Get("opt") == "bias" && !c.QKVBias {
				return nil
			}
			if t.Tag.Get("opt") == "qknorm" && !c.QKNorm {
				return nil
			}
			if tied := t.Tag.Get("tied"); tied != "" {
				c.TiedOutput = true
				v.Set(reflect.ValueOf(m).Elem().FieldByName(tied))
				return nil
			}
			return fmt.Errorf("llama: tensor %q is missing", name)
		}
		if want := c.expected(t.Name); !w.Shape.Equal(want) {
			return fmt.Errorf("llama: tensor %q has shape %v, the config implies %v", name, w.Shape, want)
		}
		if w.DType != graph.F32 && w.DType != graph.F16 && w.DType != graph.BF16 && !w.Quantized() && w.Blocks == 0 {
			return fmt.Errorf("llama: tensor %q has unsupported dtype %v", name, w.DType)
		}
		// Norm weights and biases feed f32-only ops; they are tiny, so convert.
		if len(w.Shape) == 1 {
			w = ToF32(w)
		}
		v.Set(reflect.ValueOf(w))
		return nil
	}
	if err := bindStruct(reflect.ValueOf(m).Elem(), tag, "", bind); err != nil {
		return err
	}
	layerTag, _ := reflect.TypeOf(*m).FieldByName("Layers")
	for i := range c.Layers {
		var l Layer
		prefix := fmt.Sprintf(layerTag.Tag.Get(tag), i)
		if err := bindStruct(reflect.ValueOf(&l).Elem(), tag, prefix, bind); err != nil {
			return fmt.Errorf("layer %d of the %d the config declares: %w", i, c.Layers, err)
		}
		m.Layers = append(m.Layers, l)
	}
	for _, w := range []*Weight{&m.Embed, &m.Output} {
		w.disown()
	}
	return nil
}

// disown clears Owned on w and its scales and biases.
func (w *Weight) disown() {
	w.Owned = false
	if q := w.Quant; q != nil {
		q.Scales.Owned, q.Biases.Owned = false, false
	}
}

func bindStruct(v reflect.Value, tag, prefix string, bind func(reflect.Value, reflect.StructField, string) error) error {
	t := v.Type()
	// Bind Embed before Output so a tied Output can copy it.
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type != reflect.TypeOf(Weight{}) {
			continue
		}
		if err := bind(v.Field(i), f, prefix); err != nil {
			return err
		}
	}
	return nil
}

// ToF32 converts a weight to float32 (a copy unless it already is);
// quantized weights are dequantized.
func ToF32(w Weight) Weight {
	if w.Quantized() || w.Blocks != 0 {
		w.DType, w.Data, w.Quant, w.Blocks = graph.F32, graph.AsBytes(dequantize(w)), nil, 0
		return w
	}
	if w.DType == graph.F32 {
		return w
	}
	n := w.Shape.Numel()
	out := make([]float32, n)
	for i := range n {
		h := uint16(w.Data[2*i]) | uint16(w.Data[2*i+1])<<8
		if w.DType == graph.F16 {
			out[i] = quant.F16ToF32(h)
		} else {
			out[i] = quant.BF16ToF32(h)
		}
	}
	w.DType, w.Data = graph.F32, graph.AsBytes(out)
	return w
}

// F32Values returns a fresh float32 slice of the weight's values, row-major:
// quantized weights are dequantized, halves widened.
func F32Values(w Weight) []float32 {
	b := ToF32(w).Data
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// ForBackend returns m as be runs it: m itself when be has kernels for
// every block format among its weights, else a copy (sharing every other
// weight) whose block weights are converted exactly (convertBlocks). The
// copy's converted weights are owned, except the embedding and output
// projection, as in every model.
func (m *Model) ForBackend(be graph.Backend) (*Model, error) {
	needs := func(w *Weight) bool { return w.Blocks != 0 && !blocksRun(be, w.Blocks) }
	if !slices.ContainsFunc(m.weightsOf(), needs) {
		return m, nil
	}
	c := *m
	c.Layers = slices.Clone(m.Layers)
	for _, w := range c.weightsOf() {
		if !needs(w) {
			continue
		}
		cw, err := convertBlocks(*w)
		if err != nil {
			return nil, fmt.Errorf("llama: converting for the %s backend: %w", be.Name(), err)
		}
		*w = cw
	}
	if c.Config.TiedOutput {
		c.Output = c.Embed
	}
	c.Embed.disown()
	c.Output.disown()
	return &c, nil
}

// weightsOf lists every weight of the model for binding to a backend, each
// distinct tensor once.
func (m *Model) weightsOf() []*Weight {
	ws := []*Weight{&m.Embed, &m.Norm}
	if !m.Config.TiedOutput {
		ws = append(ws, &m.Output)
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		ws = append(ws, &l.AttnNorm, &l.Q, &l.K, &l.V, &l.O, &l.FFNNorm, &l.Gate, &l.Up, &l.Down)
		if m.Config.QKVBias {
			ws = append(ws, &l.QBias, &l.KBias, &l.VBias)
		}
		if m.Config.QKNorm {
			ws = append(ws, &l.QNorm, &l.KNorm)
		}
		if m.Config.PostNorms {
			ws = append(ws, &l.PostAttnNorm, &l.PostFFNNorm)
		}
	}
	return ws
}

// DecodeBytes is what one decode step reads of the weights, in bytes: every
// layer's matrices, norms and biases, the final norm, the output projection,
// and one row of the embedding table (all of it when the table is also the
// output projection). Quantized weights count their codes, scales and
// biases, except the biases of a Symmetric weight for which computed (nil:
// none) reports that the backend computes them from the scales. The KV
// cache's reads come on top and grow with the context. Decoding is bound by
// memory bandwidth, so this over the machine's read bandwidth is the fastest
// a token can be.
func (m *Model) DecodeBytes(computed func(q *Quant) bool) int64 {
	var n int64
	for _, w := range m.weightsOf() {
		if w == &m.Embed && !m.Config.TiedOutput {
			// One row, looked up with its biases.
			if m.Config.Vocab > 0 {
				n += weightBytes(w, nil) / int64(m.Config.Vocab)
			}
			continue
		}
		n += weightBytes(w, computed)
	}
	return n
}

func weightBytes(w *Weight, computed func(q *Quant) bool) int64 {
	n := int64(len(w.Data))
	if q := w.Quant; q != nil {
		n += int64(len(q.Scales.Data))
		if !q.Symmetric || computed == nil || !computed(q) {
			n += int64(len(q.Biases.Data))
		}
	}
	return n
}
