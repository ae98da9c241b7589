//go:build ignore

// gen_ptx writes ptx/<stem>.ptx from every .cu file with clang-16 (run by
// `go generate ./backend/cuda/shaders`).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
)

func main() {
	files, err := filepath.Glob("*.cu")
	if err != nil || len(files) == 0 {
		fmt.Fprintln(os.Stderr, "gen_ptx: no .cu files here")
		os.Exit(1)
	}
	if err := os.MkdirAll("ptx", 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gen_ptx:", err)
		os.Exit(1)
	}
	for _, f := range files {
		out, err := tools.CompilePTX(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen_ptx:", err)
			os.Exit(1)
		}
		dst := filepath.Join("ptx", strings.TrimSuffix(f, ".cu")+".ptx")
		if err := os.WriteFile(dst, out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen_ptx:", err)
			os.Exit(1)
		}
	}
}
