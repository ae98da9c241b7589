//go:build darwin

package metalcheck

import (
	"bytes"
	"errors"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/mtl"
)

// TestSelfTestOnDevice runs the self-test on the Mac's GPU (skipped when
// there is none): `go test ./internal/backend/metal/metalcheck -run OnDevice -v`
// prints the same table as `go run ./internal/cmd/gpucheck --backend metal`.
func TestSelfTestOnDevice(t *testing.T) {
	be, err := metal.Open()
	if errors.Is(err, mtl.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	vs, err := SelfTest(be, cpu.NewReference(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	ok := Write(&buf, be.Device(), vs)
	t.Logf("\n%s", buf.String())
	if !ok {
		t.Error("some kernels failed on the device")
	}
}
