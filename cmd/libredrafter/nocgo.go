//go:build !cgo

package main

import (
	"fmt"
	"os"
)

// Without cgo Go cannot export C symbols, so there is no library to build;
// this keeps `CGO_ENABLED=0 go build ./...` (and the darwin cross-checks)
// working.
func main() {
	fmt.Fprintln(os.Stderr, "libredrafter: built without cgo; build it with CGO_ENABLED=1 and -buildmode=c-shared or c-archive (make lib)")
	os.Exit(2)
}
