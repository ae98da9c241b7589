package metal

import "github.com/seed9b8f47b1/redrafter/internal/backend/cpu"

// The tests of this package run plans on the fake device with every step
// executed by the CPU reference backend, as the tests of the packages
// above do (the production package imports no other backend: the
// reference is passed in).

// newReferenceFake is a backend over newReferenceDevice.
func newReferenceFake(p Policy) *Backend { return newBackend(newReferenceDevice(), p) }

// newReferenceDevice is a fake device that runs each step on the CPU
// reference backend.
func newReferenceDevice() *fakeDevice { return newFakeDevice(Fake{Reference: cpu.NewReference()}) }
