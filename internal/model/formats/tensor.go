package formats

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Tensor is one stored tensor: its name, storage type, shape and bytes.
type Tensor struct {
	Name  string
	DType DType
	// Shape is row-major, outermost dimension first (PyTorch order). An empty
	// Shape is a scalar.
	Shape []int
	// Offset is the position of Data in the file (in the bytes given to a
	// Parse function).
	Offset int64
	// Data is the tensor's bytes, little-endian, as stored. For a tensor read
	// from a file it is a read-only view of the mapping, valid until the file
	// is closed; see the package documentation. Its capacity equals its
	// length, so appending to it copies.
	Data []byte
}

// NumElements is the product of Shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t *Tensor) String() string {
	return fmt.Sprintf("%s %s %v", t.Name, t.DType, t.Shape)
}

// Float32s returns the tensor's values as float32. For F32 data that is
// 4-byte aligned on a little-endian machine it returns a view of Data without
// copying, which must not be modified and shares Data's lifetime. Unaligned
// F32 data, and F16 and BF16 data, are converted into a new slice. Other
// types return an error.
func (t *Tensor) Float32s() ([]float32, error) {
	n := len(t.Data)
	switch t.DType {
	case F32:
		if n%4 != 0 {
			break
		}
		if n == 0 {
			return []float32{}, nil
		}
		p := unsafe.Pointer(unsafe.SliceData(t.Data))
		if littleEndian && uintptr(p)%4 == 0 {
			return unsafe.Slice((*float32)(p), n/4), nil
		}
		out := make([]float32, n/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
		return out, nil
	case F16, BF16:
		if n%2 != 0 {
			break
		}
		conv := quant.F16ToF32
		if t.DType == BF16 {
			conv = quant.BF16ToF32
		}
		out := make([]float32, n/2)
		for i := range out {
			out[i] = conv(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
		return out, nil
	default:
		return nil, fmt.Errorf("formats: tensor %q: no float32 conversion for %s", t.Name, t.DType)
	}
	return nil, fmt.Errorf("formats: tensor %q: %d bytes is not a whole number of %s elements", t.Name, n, t.DType)
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// shapeNumel returns the product of dims, or ok=false if a dimension is
// negative or the product overflows an int.
func shapeNumel(dims []int) (n int, ok bool) {
	n = 1
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		n = int(lo)
	}
	return n, true
}
