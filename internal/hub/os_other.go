//go:build !unix

package hub

import (
	"context"
	"errors"
)

// freeBytes is unknown here: the writes tell when the disk is full.
func freeBytes(string) (int64, error) { return 0, errors.New("free space unknown on this system") }

// lockFile does not lock on systems without flock (redrafter's targets are
// Linux and macOS): two pulls of one file at once may both download it, and
// the rename of the second replaces the first's identical, verified blob.
func lockFile(context.Context, string, func()) (func(), error) { return func() {}, nil }
