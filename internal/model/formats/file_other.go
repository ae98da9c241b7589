//go:build !unix

package formats

import "os"

// openNoBlock opens path read-only; OpenFile has checked that it is a
// regular file.
func openNoBlock(path string) (*os.File, error) { return os.Open(path) }
