//go:build linux || darwin

package formats

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// mapFile maps path read-only. unmap releases the mapping; it is safe to call
// once. A file of size 0 gives empty data.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	f, st, err := OpenFile(path) // refuses a named pipe without blocking on it
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	size := st.Size()
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("%s: %d bytes is too large to map", path, size)
	}
	data, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	// Backends may hand the mapping's pages to a GPU without copying only
	// because it is recorded as memory outside Go's heap.
	forget := graph.RecordMapped(data)
	return data, func() error { forget(); return unix.Munmap(data) }, nil
}
