package metal_test

import (
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/emu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/metaltest"
)

// Package metal's tests run the emulated kernels with metaltest's executor.
func init() {
	metal.NewEmulatorForTest = func(tb testing.TB, override map[string]string, contract emu.Contract, orders []core.Order) (func(*metal.Dispatch) error, func() map[string]int) {
		x := metaltest.NewEmulator(tb, override)
		x.Contract, x.Orders = contract, orders
		return x.Exec, x.Ran
	}
}
