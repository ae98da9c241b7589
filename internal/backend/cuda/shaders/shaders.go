// Package shaders holds the CUDA kernels: one .cu file per op family (the
// stems of internal/backend/metal/shaders) over prelude.cuh, and the PTX that clang
// generates from them, checked in under ptx/ and embedded, so a server
// needs no CUDA toolkit: the driver's JIT compiles the PTX for its GPU.
//
// After editing a .cu file, run `go generate ./internal/backend/cuda/shaders`
// (it needs clang-16: scripts/install-cuda-tools.sh). It writes ptx/SUMS
// too, the sums of each file's inputs and PTX: make test fails while they
// do not match the sources (TestPTXSums), and make test-all while the
// checked-in PTX differs from what clang writes (TestPTXUpToDate).
package shaders

//go:generate go run gen_ptx.go

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

//go:embed *.cu prelude.cuh
var sources embed.FS

//go:embed ptx/*.ptx
var ptx embed.FS

// Files returns the names of the .cu files, sorted.
func Files() []string {
	names, _ := fs.Glob(sources, "*.cu")
	sort.Strings(names)
	return names
}

// Source returns a .cu file, or prelude.cuh.
func Source(name string) (string, error) {
	b, err := sources.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("shaders: %w", err)
	}
	return string(b), nil
}

// PTX returns the checked-in PTX of a .cu file.
func PTX(cuName string) ([]byte, error) {
	b, err := ptx.ReadFile(path.Join("ptx", strings.TrimSuffix(cuName, ".cu")+".ptx"))
	if err != nil {
		return nil, fmt.Errorf("shaders: %w", err)
	}
	return b, nil
}

var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(`)

// Kernels returns the entry points of a .cu file, from its PTX (so a kernel
// a macro defines is counted too), in the order of the file. The PTX is
// read once: the emulated tests ask for every launch, and matching the
// pattern over the PTX each time cost them more than the kernels did.
func Kernels(cuName string) ([]string, error) {
	kernelsOnce.Do(func() {
		kernelsByFile = map[string][]string{}
		for _, f := range Files() {
			b, err := PTX(f)
			if err != nil {
				continue // Kernels(f) reports it below
			}
			for _, m := range entryRE.FindAllSubmatch(b, -1) {
				kernelsByFile[f] = append(kernelsByFile[f], string(m[1]))
			}
		}
	})
	names, ok := kernelsByFile[cuName]
	if !ok {
		if _, err := PTX(cuName); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("shaders: %s defines no kernel", cuName)
	}
	return slices.Clone(names), nil
}

var (
	kernelsOnce   sync.Once
	kernelsByFile map[string][]string // .cu file to its kernels, from the PTX
)
