//go:build unix

package formats

import (
	"os"
	"syscall"
)

// openNoBlock opens path read-only with O_NONBLOCK, so that opening a named
// pipe returns at once instead of waiting for a writer (the caller then
// refuses it). Reads of a regular file ignore O_NONBLOCK.
func openNoBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
