//go:build cuda && linux

package cu

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
)

// TestRealDriverWithoutGPU loads NVIDIA's real libcuda.so.1 (unpacked by
// scripts/install-cuda-tools.sh), binds every function, and checks that
// cuInit on a machine without a GPU comes back as a clear error naming
// CUDA_ERROR_NO_DEVICE rather than a crash. On a machine with a GPU it
// checks that a device is found instead.
func TestRealDriverWithoutGPU(t *testing.T) {
	path := tools.Need(t, tools.LibCUDA)
	d, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.Version()
	if err != nil || v < 11000 {
		t.Fatalf("cuDriverGetVersion = %d, %v; want a CUDA 11+ driver", v, err)
	}
	t.Logf("driver %s: CUDA %d.%d", path, v/1000, v%1000/10)
	err = d.Init()
	if err == nil {
		n, err := d.DeviceCount()
		if err != nil || n < 1 {
			t.Fatalf("cuInit succeeded but %d devices: %v", n, err)
		}
		t.Logf("a GPU is present: %d device(s)", n)
		return
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("cuInit: %v is not a *cu.Error", err)
	}
	t.Logf("cuInit: %v", err)
	if ce.Result != NoDevice && ce.Name != "CUDA_ERROR_NO_DEVICE" {
		// Without the kernel module the driver may say so differently;
		// the message must still name the result.
		if !strings.Contains(err.Error(), ce.Name) {
			t.Errorf("message %q does not name %s", err, ce.Name)
		}
		return
	}
	if !strings.Contains(err.Error(), "no NVIDIA GPU") {
		t.Errorf("message %q does not say that there is no GPU", err)
	}
}

// TestLoadMissingLibrary: a machine without the NVIDIA driver gets an
// error that says so.
func TestLoadMissingLibrary(t *testing.T) {
	_, err := Load("/nonexistent/libcuda.so.1")
	if err == nil || !strings.Contains(err.Error(), "NVIDIA driver") {
		t.Fatalf("err = %v", err)
	}
}

// TestKernelNodeParamsLayout: the Go struct passed to
// cuGraphAddKernelNode_v2 has CUDA_KERNEL_NODE_PARAMS_v2's layout (cuda.h,
// CUDA 12 and 13, 64-bit): a wrong offset would launch garbage on a GPU,
// which no emulated test sees.
func TestKernelNodeParamsLayout(t *testing.T) {
	var p kernelNodeParams
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"func", unsafe.Offsetof(p.fn), 0}, {"gridDimX", unsafe.Offsetof(p.gridX), 8},
		{"blockDimZ", unsafe.Offsetof(p.blkZ), 28}, {"sharedMemBytes", unsafe.Offsetof(p.shared), 32},
		{"kernelParams", unsafe.Offsetof(p.kernelParams), 40}, {"extra", unsafe.Offsetof(p.extra), 48},
		{"kern", unsafe.Offsetof(p.kern), 56}, {"ctx", unsafe.Offsetof(p.ctx), 64}, {"sizeof", unsafe.Sizeof(p), 72},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, want %d", f.name, f.got, f.want)
		}
	}
}
