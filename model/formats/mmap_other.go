//go:build !linux && !darwin

package formats

import (
	"fmt"
	"os"
)

// mapFile reads the whole file: this system has no mmap support here. The
// data is writable heap memory, but callers must treat it as read-only all
// the same.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
