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

// ggmlWeight re-expresses a GGUF block-quantized tensor: Q4_0, Q8_0 and
// Q4_K as affine groups of 32 with the same dequantized values (a copy:
// the nibble order differs). Q6_K has a scale per 16 values, which no
// affine group of 32 holds exactly, so it becomes f16: each value within
// 2^-11 of ggml's (at most 1/64 of Q6_K's own step), at half
// the bytes of f32.
func ggmlWeight(t *formats.Tensor, typ quant.GGML) (Weight, error) {
	if len(t.Shape) != 2 {
		return Weight{}, fmt.Errorf("tensor %q: %s %v: only matrices can be quantized", t.Name, t.DType, t.Shape)
	}
	n := t.Shape[0] * t.Shape[1]
	shape := graph.Shape{t.Shape[0], t.Shape[1]}
	if typ == quant.Q6_K {
		v := make([]float32, n)
		if err := quant.DequantizeGGML(typ, v, t.Data); err != nil {
			return Weight{}, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return Weight{Name: t.Name, DType: graph.F16, Shape: shape, Data: graph.AsBytes(quant.F32sToF16(v))}, nil
	}
	if t.Shape[1]%typ.BlockElems() != 0 {
		return Weight{}, fmt.Errorf("tensor %q: rows of %d are not whole %s blocks", t.Name, t.Shape[1], t.DType)
	}
	a, err := quant.GGMLToAffine(typ, n, t.Data)
	if err != nil {
		return Weight{}, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	sshape := graph.Shape{t.Shape[0], t.Shape[1] / 32}
	enc := func(v []float32) Weight {
		if a.F16 {
			return Weight{DType: graph.F16, Shape: sshape, Data: graph.AsBytes(quant.F32sToF16(v)), Owned: true}
		}
		return Weight{DType: graph.F32, Shape: sshape, Data: graph.AsBytes(v), Owned: true}
	}
	q := &Quant{Bits: a.Bits, GroupSize: 32, Scales: enc(a.Scales), Biases: enc(a.Biases), Symmetric: typ != quant.Q4_K}
	q.Scales.Name, q.Biases.Name = t.Name+".scales", t.Name+".biases"
	return Weight{Name: t.Name, DType: graph.U32, Shape: shape, Data: graph.AsBytes(a.Packed), Quant: q, Owned: true}, nil
}

// ggmlTypes maps the block types WeightOf accepts.
var ggmlTypes = map[formats.DType]quant.GGML{
	formats.Q4_0: quant.Q4_0, formats.Q8_0: quant.Q8_0, formats.Q4_K: quant.Q4_K, formats.Q6_K: quant.Q6_K,
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

// dequantize returns the reference dequantization of a quantized weight.
func dequantize(w Weight) []float32 {
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
