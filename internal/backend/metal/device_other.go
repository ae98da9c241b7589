//go:build !darwin

package metal

import "github.com/seed9b8f47b1/redrafter/internal/backend/metal/mtl"

func openDevice() (device, error) { return nil, mtl.ErrUnavailable }

func listDevices() ([]DeviceInfo, error) { return nil, mtl.ErrUnavailable }
