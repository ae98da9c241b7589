package emu

import (
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"
)

var shared core.Shared[*Builder]

// ForTest returns the test binary's Builder, over the build directory the
// emulators share (removed by core.Main). Without a compiler the test is
// skipped, or fails under CI (core.Require).
func ForTest(tb testing.TB) *Builder {
	tb.Helper()
	return shared.Get(tb, NewBuilder)
}
