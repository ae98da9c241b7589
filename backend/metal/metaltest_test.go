package metal_test

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/backend/metal"
	"github.com/seed9b8f47b1/redrafter/backend/metal/metaltest"
)

// Package metal's tests run the emulated kernels with metaltest's executor.
func init() {
	metal.NewEmulatorForTest = func(tb testing.TB, override map[string]string) (func(*metal.Dispatch) error, func() map[string]int) {
		x := metaltest.NewEmulator(tb, override)
		return x.Exec, x.Ran
	}
}
