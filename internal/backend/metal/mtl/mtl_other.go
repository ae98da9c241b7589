//go:build !darwin

package mtl

// Device is an MTLDevice; there is none on this system.
type Device struct{}

// CreateSystemDefaultDevice reports that Metal is unavailable.
func CreateSystemDefaultDevice() (Device, error) { return Device{}, ErrUnavailable }

// CopyAllDevices reports that Metal is unavailable.
func CopyAllDevices() ([]Device, error) { return nil, ErrUnavailable }

// GPUCoreCount is 0: there is no Apple GPU on this system.
func GPUCoreCount() int { return 0 }
