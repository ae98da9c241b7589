//go:build darwin

package metal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/mtl"
)

// TestSelfTestOnDevice runs the self-test on the Mac's GPU (skipped when
// there is none): `go test ./metal -run OnDevice -v` prints the same table
// as `redrafter selftest --backend metal`.
func TestSelfTestOnDevice(t *testing.T) {
	be, err := Open()
	if errors.Is(err, mtl.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	vs, err := SelfTest(be, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	ok := WriteSelfTest(&buf, be.Device(), vs)
	t.Logf("\n%s", buf.String())
	if !ok {
		t.Error("some kernels failed on the device")
	}
}
