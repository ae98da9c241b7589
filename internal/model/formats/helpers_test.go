package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// codedTensor makes a tensor whose element at coordinates (i, j, k, ...) holds
// the decimal number "ijk..." (digit per coordinate, mod 10), so a layout
// mistake shows up as a wrong coordinate. Quantized types get bytes
// numbered 0, 1, 2, ... instead.
func codedTensor(name string, dt DType, shape ...int) Tensor {
	numel, _ := shapeNumel(shape)
	size, ok := dt.ByteSize(numel)
	if !ok {
		panic("codedTensor: bad size")
	}
	data := make([]byte, size)
	if dt.IsQuantized() {
		for i := range data {
			data[i] = byte(i)
		}
		return Tensor{Name: name, DType: dt, Shape: shape, Data: data}
	}
	for idx := range numel {
		v := coordCode(shape, idx)
		e := data[idx*dt.BytesPerBlock():]
		le := binary.LittleEndian
		switch dt {
		case F32:
			le.PutUint32(e, math.Float32bits(float32(v)))
		case F64:
			le.PutUint64(e, math.Float64bits(float64(v)))
		case F16:
			le.PutUint16(e, quant.F32ToF16(float32(v)))
		case BF16:
			le.PutUint16(e, quant.F32ToBF16(float32(v)))
		default: // integers of every width; BOOL and F8 get the low byte
			var buf [8]byte
			le.PutUint64(buf[:], uint64(v))
			copy(e, buf[:dt.BytesPerBlock()])
		}
	}
	return Tensor{Name: name, DType: dt, Shape: shape, Data: data}
}

// coordCode is the coordinate code of the flat row-major index idx.
func coordCode(shape []int, idx int) int {
	code, scale := 0, 1
	for d := len(shape) - 1; d >= 0; d-- {
		code += idx % shape[d] % 10 * scale
		idx /= shape[d]
		scale *= 10
	}
	return code
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkErr fails unless err is non-nil, has the wanted concrete type
// ("format", "unsupported" or "" for any) and contains want.
func checkErr(t *testing.T, call string, err error, kind, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %q", call, want)
		return
	}
	var fe *FormatError
	var ue *UnsupportedError
	switch {
	case kind == "format" && !errors.As(err, &fe):
		t.Errorf("%s: error %q is %T, want *FormatError", call, err, err)
	case kind == "unsupported" && !errors.As(err, &ue):
		t.Errorf("%s: error %q is %T, want *UnsupportedError", call, err, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %q does not contain %q", call, err, want)
	}
}

func writeGGUFBytes(t testing.TB, kv []KV, tensors []Tensor, align int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteGGUF(&b, kv, tensors, align); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeSafetensorsBytes(t testing.TB, tensors []Tensor, meta map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSafetensors(&b, tensors, meta); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
