package llama

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Quant describes an affine-quantized weight in MLX's layout (package
// quant): the Weight's Data holds the packed codes, uint32
// [out, in·Bits/32], its DType is graph.U32 and its Shape is the logical
// [out, in]. Scales and Biases are [out, in/GroupSize] in f16, bf16 or f32.
type Quant struct {
	Bits, GroupSize int
	Scales, Biases  Weight
	// Symmetric is set when every bias is -2^(Bits-1) times its group's
	// scale (GGUF's Q4_0 and Q8_0 blocks, d·(q-8) and d·q): a backend may
	// compute the biases instead of reading them, as the CPU's tile kernels
	// do. DecodeBytes needs to know.
	Symmetric bool
}

// Quantized reports whether w is affine-quantized.
func (w Weight) Quantized() bool { return w.Quant != nil }

// scaleDType maps a stored scale type to the graph's.
func scaleDType(t *formats.Tensor) (graph.DType, bool) {
	switch t.DType {
	case formats.F16:
		return graph.F16, true
	case formats.BF16:
		return graph.BF16, true
	case formats.F32:
		return graph.F32, true
	}
	return 0, false
}

// AffineWeightOf maps an MLX-quantized tensor — packed U32 codes w
// [out, cols·bits/32] with scales and biases [out, cols/groupSize] — to a
// Weight of logical shape [out, cols], without copying. Bits and group size
// follow from the shapes; they must be 4 or 8 and 32, 64 or 128.
func AffineWeightOf(name string, w, scales, biases *formats.Tensor, cols int) (Weight, error) {
	if scales == nil || biases == nil {
		return Weight{}, fmt.Errorf("tensor %q: quantized weights need both .scales and .biases (only MLX's affine mode is supported)", name)
	}
	if w.DType != formats.U32 || len(w.Shape) != 2 {
		return Weight{}, fmt.Errorf("tensor %q: quantized codes are %s %v, want U32 [out, packed]", name, w.DType, w.Shape)
	}
	out, packed := w.Shape[0], w.Shape[1]
	if cols <= 0 || (packed*32)%cols != 0 {
		return Weight{}, fmt.Errorf("tensor %q: %d packed words per row cannot hold %d columns", name, packed, cols)
	}
	bits := packed * 32 / cols
	if !graph.QuantBits(bits) {
		return Weight{}, fmt.Errorf("tensor %q: %d-bit codes are not supported (4 or 8)", name, bits)
	}
	if len(scales.Shape) != 2 || scales.Shape[0] != out || scales.Shape[1] <= 0 || cols%scales.Shape[1] != 0 {
		return Weight{}, fmt.Errorf("tensor %q: scales have shape %v for %d×%d codes", name, scales.Shape, out, cols)
	}
	gs := cols / scales.Shape[1]
	if !graph.QuantGroupSize(gs) {
		return Weight{}, fmt.Errorf("tensor %q: groups of %d are not supported (32, 64 or 128)", name, gs)
	}
	sdt, ok := scaleDType(scales)
	if !ok {
		return Weight{}, fmt.Errorf("tensor %q: scales of dtype %s (want F16, BF16 or F32)", name, scales.DType)
	}
	if biases.DType != scales.DType || !slicesEqual(biases.Shape, scales.Shape) {
		return Weight{}, fmt.Errorf("tensor %q: biases %s %v do not match scales %s %v", name, biases.DType, biases.Shape, scales.DType, scales.Shape)
	}
	return Weight{Name: name, DType: graph.U32, Shape: graph.Shape{out, cols}, Data: w.Data, Quant: &Quant{
		Bits: bits, GroupSize: gs,
		Scales: Weight{Name: scales.Name, DType: sdt, Shape: append(graph.Shape(nil), scales.Shape...), Data: scales.Data},
		Biases: Weight{Name: biases.Name, DType: sdt, Shape: append(graph.Shape(nil), biases.Shape...), Data: biases.Data},
	}}, nil
}

func slicesEqual(a, b []int) bool { return graph.Shape(a).Equal(b) }

// quantizedTriplet finds the MLX triplet of a weight name ending in
// ".weight": its .scales and .biases tensors, if the checkpoint has them.
func quantizedTriplet(name string, find func(string) (*formats.Tensor, bool)) (base string, scales, biases *formats.Tensor, ok bool) {
	base, found := strings.CutSuffix(name, ".weight")
	if !found {
		return "", nil, nil, false
	}
	scales, ok = find(base + ".scales")
	if !ok {
		return "", nil, nil, false
	}
	biases, _ = find(base + ".biases")
	return base, scales, biases, true
}

// LookupWeight finds a weight by name in a safetensors checkpoint, as MLX
// does: if name is "<path>.weight" and "<path>.scales" exists, the weight
// is affine-quantized (AffineWeightOf, with cols the logical number of
// columns the caller expects); otherwise it is a plain tensor (WeightOf).
func LookupWeight(find func(string) (*formats.Tensor, bool), name string, cols int) (w Weight, found bool, err error) {
	t, ok := find(name)
	if !ok {
		return Weight{}, false, nil
	}
	if _, s, b, q := quantizedTriplet(name, find); q {
		w, err = AffineWeightOf(name, t, s, b, cols)
		return w, true, err
	}
	w, err = WeightOf(t)
	return w, true, err
}

// GGUF block-quantized tensors are loaded in one of two ways (ggmlWeight):
//
//   - Q4_0, Q8_0, Q4_1 and Q4_K become affine groups of 32 with the same
//     values (a copy: the nibble order differs), which every backend runs
//     at the format's own size (Q4_K's scales take f32: 4.5 bits a value
//     become 5).
//   - Q5_0, Q5_1, Q5_K, Q2_K, Q3_K, Q6_K, IQ4_NL and IQ4_XS stay as the
//     file stores them (Weight.Blocks, no copy), for backends with kernels
//     for the format (graph.BlockMatMulOp: the CPU). Bind converts them for
//     a backend without, exactly (convertBlocks): Q5_0, Q5_1 and Q5_K to
//     8-bit affine groups, the others (groups of 16, non-linear levels) to
//     f16 when every value is a half, else to f32.

// affineGGML are the formats loaded as affine groups.
var affineGGML = map[formats.DType]quant.GGML{
	formats.Q4_0: quant.Q4_0, formats.Q8_0: quant.Q8_0, formats.Q4_1: quant.Q4_1, formats.Q4_K: quant.Q4_K,
}

// blockGGML are the formats loaded as blocks.
var blockGGML = map[formats.DType]quant.GGML{
	formats.Q5_0: quant.Q5_0, formats.Q5_1: quant.Q5_1, formats.Q5_K: quant.Q5_K, formats.Q2_K: quant.Q2_K,
	formats.Q3_K: quant.Q3_K, formats.Q6_K: quant.Q6_K, formats.IQ4_NL: quant.IQ4_NL, formats.IQ4_XS: quant.IQ4_XS,
}

// GGUFTypes lists the tensor types WeightOf loads, plain and quantized.
func GGUFTypes() []formats.DType {
	return []formats.DType{formats.F32, formats.F16, formats.BF16, formats.Q4_0, formats.Q4_1, formats.Q5_0,
		formats.Q5_1, formats.Q8_0, formats.Q2_K, formats.Q3_K, formats.Q4_K, formats.Q5_K, formats.Q6_K,
		formats.IQ4_NL, formats.IQ4_XS}
}

func supportedTypes() string {
	var names []string
	for _, t := range GGUFTypes() {
		names = append(names, t.String())
	}
	return strings.Join(names, ", ")
}

// ggmlWeight maps a GGUF block-quantized tensor as the comment above says.
func ggmlWeight(t *formats.Tensor) (Weight, error) {
	typ, affine := affineGGML[t.DType]
	if !affine {
		var ok bool
		if typ, ok = blockGGML[t.DType]; !ok {
			return Weight{}, fmt.Errorf("tensor %q has GGUF type %s, which is not supported (supported: %s)", t.Name, t.DType, supportedTypes())
		}
	}
	if len(t.Shape) != 2 {
		return Weight{}, fmt.Errorf("tensor %q: %s %v: only matrices can be quantized", t.Name, t.DType, t.Shape)
	}
	if t.Shape[1]%typ.BlockElems() != 0 {
		return Weight{}, fmt.Errorf("tensor %q: rows of %d are not whole %s blocks", t.Name, t.Shape[1], t.DType)
	}
	n := t.Shape[0] * t.Shape[1]
	shape := graph.Shape{t.Shape[0], t.Shape[1]}
	if !affine {
		if want, _ := t.DType.ByteSize(n); len(t.Data) != want {
			return Weight{}, fmt.Errorf("tensor %q: %d bytes for %s %v, want %d", t.Name, len(t.Data), t.DType, t.Shape, want)
		}
		return Weight{Name: t.Name, DType: graph.U8, Shape: shape, Data: t.Data, Blocks: typ}, nil
	}
	return affineWeight(t.Name, typ, shape, t.Data)
}

// affineWeight converts blocks of a format with an affine form
// (quant.GGML.HasAffineForm) to an owned affine-quantized weight.
func affineWeight(name string, typ quant.GGML, shape graph.Shape, data []byte) (Weight, error) {
	a, err := quant.GGMLToAffine(typ, shape.Numel(), data)
	if err != nil {
		return Weight{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	sshape := graph.Shape{shape[0], shape[1] / 32}
	enc := func(v []float32) Weight {
		if a.F16 {
			return Weight{DType: graph.F16, Shape: sshape, Data: graph.AsBytes(quant.F32sToF16(v)), Owned: true}
		}
		return Weight{DType: graph.F32, Shape: sshape, Data: graph.AsBytes(v), Owned: true}
	}
	q := &Quant{Bits: a.Bits, GroupSize: 32, Scales: enc(a.Scales), Biases: enc(a.Biases),
		Symmetric: typ == quant.Q4_0 || typ == quant.Q8_0}
	q.Scales.Name, q.Biases.Name = name+".scales", name+".biases"
	return Weight{Name: name, DType: graph.U32, Shape: shape, Data: graph.AsBytes(a.Packed), Quant: q, Owned: true}, nil
}

// blocksRun reports whether be has kernels for w's block format: products,
// lookups and the plain dequantization.
func blocksRun(be graph.Backend, typ quant.GGML) bool {
	name := typ.String()
	return be.Supports(graph.BlockMatMulOp{Type: name}, []graph.DType{graph.F32, graph.U8}) &&
		be.Supports(graph.BlockEmbedOp{Type: name}, []graph.DType{graph.U8, graph.I32}) &&
		be.Supports(graph.DequantizeBlocksOp{Type: name}, []graph.DType{graph.U8})
}

// convertBlocks is a block weight in a form every backend runs, with the
// same values: 8-bit affine groups for the 5-bit formats, else f16 when
// every value survives a round trip through a half, else f32.
func convertBlocks(w Weight) (Weight, error) {
	if w.Blocks.HasAffineForm() {
		return affineWeight(w.Name, w.Blocks, w.Shape, w.Data)
	}
	v := make([]float32, w.Shape.Numel())
	if err := quant.DequantizeGGML(w.Blocks, v, w.Data); err != nil {
		return Weight{}, fmt.Errorf("tensor %q: %w", w.Name, err)
	}
	out := Weight{Name: w.Name, DType: graph.F32, Shape: w.Shape, Data: graph.AsBytes(v), Owned: true}
	h := quant.F32sToF16(v)
	for i, x := range h {
		if quant.F16ToF32(x) != v[i] {
			return out, nil
		}
	}
	out.DType, out.Data = graph.F16, graph.AsBytes(h)
	return out, nil
}

// RunsAs says how a tensor of GGUF type typ runs on be: as stored, as
// blocks of its format, or converted at load (and to what).
func RunsAs(typ formats.DType, be graph.Backend) string {
	switch typ {
	case formats.F32, formats.F16, formats.BF16:
		return "as stored"
	}
	if t, ok := affineGGML[typ]; ok {
		bits := 4
		if t == quant.Q8_0 {
			bits = 8
		}
		return fmt.Sprintf("%d-bit affine (exact)", bits)
	}
	t, ok := blockGGML[typ]
	switch {
	case !ok:
		return "not supported"
	case blocksRun(be, t):
		if i8, ok := be.(interface{ BlocksInt8(string) bool }); ok && i8.BlocksInt8(t.String()) {
			return t.String() + " blocks, int8 activations (AVX-512 VNNI)"
		}
		return t.String() + " blocks"
	case t.HasAffineForm():
		return "8-bit affine (exact)"
	}
	return "f16 or f32 (exact)"
}

// floats returns a float weight's values as float32 (f16/bf16/f32 data).
func floats(w Weight) []float32 {
	n := w.Shape.Numel()
	out := make([]float32, n)
	for i := range n {
		switch w.DType {
		case graph.F32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(w.Data[4*i:]))
		case graph.F16:
			out[i] = quant.F16ToF32(binary.LittleEndian.Uint16(w.Data[2*i:]))
		case graph.BF16:
			out[i] = quant.BF16ToF32(binary.LittleEndian.Uint16(w.Data[2*i:]))
		}
	}
	return out
}

// dequantize returns the reference dequantization of a quantized weight
// (affine or blocks).
func dequantize(w Weight) []float32 {
	if w.Blocks != 0 {
		out := make([]float32, w.Shape.Numel())
		if err := quant.DequantizeGGML(w.Blocks, out, w.Data); err != nil {
			panic("llama: " + err.Error()) // checked at load
		}
		return out
	}
	q := w.Quant
	codes := make([]uint32, len(w.Data)/4)
	for i := range codes {
		codes[i] = binary.LittleEndian.Uint32(w.Data[4*i:])
	}
	out := make([]float32, w.Shape.Numel())
	quant.DequantizeAffine(out, codes, floats(q.Scales), floats(q.Biases), q.Bits, q.GroupSize)
	return out
}

// hfWeight looks a weight up in an HF checkpoint. A quantized weight takes
// its bits and group size from config.json's quantization block (with any
// per-module override), which must agree with the tensors' shapes.
func hfWeight(ck *formats.Checkpoint, q *formats.Quantization, name string) (Weight, bool, error) {
	t, ok := ck.Tensor(name)
	if !ok {
		return Weight{}, false, nil
	}
	base, s, b, isQ := quantizedTriplet(name, ck.Tensor)
	if !isQ {
		w, err := WeightOf(t)
		return w, true, err
	}
	if q == nil {
		return Weight{Name: name}, true, fmt.Errorf("tensor %q is quantized (%s exists) but config.json has no quantization block", name, s.Name)
	}
	if q.Mode != "" && q.Mode != "affine" {
		return Weight{Name: name}, true, fmt.Errorf("tensor %q: quantization mode %q is not supported (affine only)", name, q.Mode)
	}
	gs, bits, on := q.Module(base)
	if !on || bits <= 0 || len(t.Shape) != 2 {
		return Weight{Name: name}, true, fmt.Errorf("tensor %q has scales but config.json does not quantize %s (bits %d)", name, base, bits)
	}
	w, err := AffineWeightOf(name, t, s, b, t.Shape[1]*32/bits)
	if err == nil && (w.Quant.Bits != bits || w.Quant.GroupSize != gs) {
		err = fmt.Errorf("tensor %q: shapes imply %d bits in groups of %d, config.json says %d and %d",
			name, w.Quant.Bits, w.Quant.GroupSize, bits, gs)
	}
	if err != nil {
		return Weight{Name: name}, true, err
	}
	return w, true, nil
}
