package emu

import (
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"
)

var shared core.Shared[*Builder]

// Main is core.Main: it runs a test binary's tests, then removes the
// programs the emulators compiled. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(emu.Main(m)) }
func Main(m *testing.M) int { return core.Main(m) }

// ForTest returns the test binary's Builder, over the build directory the
// emulators share. Without a compiler the test is skipped, or fails under
// CI (core.Require).
func ForTest(tb testing.TB) *Builder {
	tb.Helper()
	return shared.Get(tb, NewBuilder)
}
