//go:build !linux && !darwin

package formats

// mapFile reads the whole file: this system has no mmap support here. The
// data is writable heap memory, but callers must treat it as read-only all
// the same.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	data, err = ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
