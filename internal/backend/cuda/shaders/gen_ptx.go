//go:build ignore

// gen_ptx writes ptx/<stem>.ptx from every .cu file with clang-16, and
// ptx/SUMS, the sums of each file's inputs and PTX (tools.PTXSum), run by
// `go generate ./internal/backend/cuda/shaders`. Where NVIDIA's ptxas is
// installed (scripts/install-cuda-tools.sh), it then assembles each file
// for sm_90 and fails on a kernel that spills or uses too much shared
// memory: make test does not run ptxas (make test-all does, for sm_90 and
// sm_80), so this is where a kernel edit meets it first.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	prelude, err := os.ReadFile("prelude.cuh")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen_ptx:", err)
		os.Exit(1)
	}
	var sums strings.Builder
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
		cu, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen_ptx:", err)
			os.Exit(1)
		}
		sums.WriteString(tools.PTXSum(f, cu, prelude, out))
	}
	if err := os.WriteFile(filepath.Join("ptx", tools.PTXSumsFile), []byte(sums.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen_ptx:", err)
		os.Exit(1)
	}
	ptxas, err := tools.Ptxas()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen_ptx: the PTX is written; not checked with ptxas:", err)
		return
	}
	failed := false
	for _, f := range files {
		stem := strings.TrimSuffix(f, ".cu")
		ptx, err := os.ReadFile(filepath.Join("ptx", stem+".ptx"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen_ptx:", err)
			os.Exit(1)
		}
		var kernels []string
		for _, m := range entryRE.FindAllSubmatch(ptx, -1) {
			kernels = append(kernels, string(m[1]))
		}
		problems, err := tools.PtxasProblems(ptxas, ptx, "sm_90", kernels)
		if err != nil {
			problems = []string{err.Error()}
		}
		for _, p := range problems {
			fmt.Fprintf(os.Stderr, "gen_ptx: sm_90 %s: %s\n", f, p)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// entryRE finds a PTX file's kernels (as shaders.Kernels does).
var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(`)
