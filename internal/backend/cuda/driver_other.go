//go:build !(cuda && linux)

package cuda

import "errors"

// errNotBuilt says why a binary without the cuda tag has no CUDA.
var errNotBuilt = errors.New("cuda: not in this build: the CUDA backend needs Linux and `go build -tags cuda` (docs/CUDA.md)")

// Open fails: the driver binding is not in this build.
func Open() (*Backend, error) { return nil, errNotBuilt }

// Devices fails: the driver binding is not in this build.
func Devices() ([]DeviceInfo, error) { return nil, errNotBuilt }
