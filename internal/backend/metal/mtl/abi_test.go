package mtl

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/seed9b8f47b1/redrafter/internal/backend/emu"
)

// The dispatch arguments are laid out as abi.go says for each architecture.
func TestDispatchWords(t *testing.T) {
	grid, group := Size{3, 5, 7}, Size{32, 2, 1}
	var a msgArgs

	w := a.dispatch("amd64", 11, 22, grid, group)
	want := []uintptr{11, 22, 0, 0, 0, 0, 3, 5, 7, 32, 2, 1}
	if len(w) != len(want) {
		t.Fatalf("amd64: %d words, want %d", len(w), len(want))
	}
	for i := range want {
		if w[i] != want[i] {
			t.Errorf("amd64: word %d = %d, want %d (%v)", i, w[i], want[i], w)
		}
	}

	w = a.dispatch("arm64", 11, 22, grid, group)
	if len(w) != 4 || w[0] != 11 || w[1] != 22 ||
		w[2] != uintptr(unsafe.Pointer(&a.sizes.grid)) || w[3] != uintptr(unsafe.Pointer(&a.sizes.group)) {
		t.Errorf("arm64: words %v, want self, _cmd and the addresses of the scratch copies", w)
	}
	if a.sizes.grid != grid || a.sizes.group != group {
		t.Errorf("arm64: scratch holds %v %v, want %v %v", a.sizes.grid, a.sizes.group, grid, group)
	}
	if w := a.dispatch("riscv64", 11, 22, grid, group); w != nil {
		t.Errorf("an unknown architecture: %v, want nil", w)
	}
}

// Packing arguments into the encoder's scratch does not allocate (the
// calls into Metal themselves are checked on a Mac, alloc_darwin_test.go).
func TestArgsDoNotAllocate(t *testing.T) {
	a := new(msgArgs)
	var sink uintptr
	n := testing.AllocsPerRun(100, func() {
		w := a.words(1, 2, 3, 4, 5)
		sink += w[4]
		w = a.dispatch(runtime.GOARCH, 1, 2, Size{1, 2, 3}, Size{4, 5, 6})
		sink += w[1]
	})
	if n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
	_ = sink
}

// The words reach a C function with objc_msgSend's prototype for
// dispatchThreadgroups:threadsPerThreadgroup: (self, _cmd, MTLSize,
// MTLSize) as that function's two structs, on this machine's C ABI (System
// V on amd64, AAPCS64 on arm64: the same rules as darwin's for these
// arguments), called the way the binding calls objc_msgSend.
func TestDispatchWordsReachC(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("no argument layout for %s", runtime.GOARCH)
	}
	cxx, err := emu.Compiler()
	emu.Require(t, err)
	const src = `
#include <stdint.h>
typedef struct { uint64_t width, height, depth; } MTLSize;
extern "C" void record(uint64_t *self, void *cmd, MTLSize grid, MTLSize group) {
	self[0] = grid.width; self[1] = grid.height; self[2] = grid.depth;
	self[3] = group.width; self[4] = group.height; self[5] = group.depth;
	self[6] = (uint64_t)cmd;
}
`
	dir := t.TempDir()
	lib := filepath.Join(dir, "librecord.so")
	cmd := exec.Command(cxx, "-x", "c++", "-shared", "-fPIC", "-O2", "-o", lib, "-")
	cmd.Stdin = strings.NewReader(src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compiling the C side: %v\n%s", err, out)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := purego.Dlsym(h, "record")
	if err != nil {
		t.Fatal(err)
	}
	out := new([7]uint64)
	a := new(msgArgs)
	grid, group := Size{1 << 40, 5, 7}, Size{32, 2, 3}
	purego.SyscallN(fn, a.dispatch(runtime.GOARCH, uintptr(unsafe.Pointer(out)), 0xc0de, grid, group)...)
	runtime.KeepAlive(a)
	runtime.KeepAlive(out)
	want := [7]uint64{1 << 40, 5, 7, 32, 2, 3, 0xc0de}
	if *out != want {
		t.Errorf("the C function received %v, want %v", *out, want)
	}
}
