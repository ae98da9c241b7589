package emu

import (
	"os"
	"sync"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

var (
	sharedMu  sync.Mutex
	sharedB   *Builder
	sharedErr error
	sharedDir string
)

// Main runs a test binary's tests with one Builder shared by all of them,
// whose files live in a temporary directory removed afterwards (or in
// $REDRAFTER_EMU_CACHE, kept, when that is set). Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(emu.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedDir != "" && envvar.EmuCache.Get() == "" {
		os.RemoveAll(sharedDir)
	}
	return code
}

// ForTest returns the shared Builder. Without a compiler the test is skipped
// with the reason, except under CI (CI set), where it fails: CI must install
// clang (scripts/install-clang.sh).
func ForTest(tb testing.TB) *Builder {
	tb.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedB == nil && sharedErr == nil {
		dir := envvar.EmuCache.Get()
		if dir == "" {
			dir, sharedErr = os.MkdirTemp("", "redrafter-emu-")
			sharedDir = dir
		} else {
			sharedErr = os.MkdirAll(dir, 0o755)
		}
		if sharedErr == nil {
			sharedB, sharedErr = NewBuilder(dir)
		}
	}
	if sharedErr != nil {
		if sharedErr == ErrNoCompiler && envvar.CI.Get() == "" {
			tb.Skip(sharedErr)
		}
		tb.Fatal(sharedErr)
	}
	return sharedB
}
