// Command gpucheck is the GPU self-test: it runs every op case once on a
// GPU backend and on the CPU reference and prints a verdict per kernel,
// the check a new Mac or GPU machine gets first (docs/METAL.md,
// docs/CUDA.md, scripts/cuda-device-check.sh). It is a developer program,
// run from a clone, so that the programs users install (redrafter,
// libredrafter) link neither the op cases nor the fake devices the
// self-test plans with:
//
//	go run ./internal/cmd/gpucheck --backend metal             # on a Mac
//	go run -tags cuda ./internal/cmd/gpucheck --backend cuda   # with an NVIDIA GPU
//
// It exits 1 when a kernel disagrees with the reference.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudacheck"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/metalcheck"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(1)
	}
}

// run parses args, checks the backend they name and writes the table to
// stdout; progress goes to stderr when it is a terminal.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpucheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", "", "the GPU backend to check: metal or cuda")
	seed := fs.Uint64("seed", 1, "seed of the random inputs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	progress := func(done, total int) {}
	f, isFile := stderr.(*os.File)
	terminal := isFile && term.IsTerminal(int(f.Fd()))
	if terminal {
		progress = func(done, total int) { fmt.Fprintf(stderr, "\rgpucheck: %d/%d cases", done, total) }
	}
	// endProgress ends the progress line on a terminal.
	endProgress := func() {
		if terminal {
			fmt.Fprintln(stderr)
		}
	}
	var ok bool
	switch *backend {
	case "metal":
		be, err := metal.Open()
		if err != nil {
			return err
		}
		defer be.Close()
		vs, err := metalcheck.SelfTest(be, cpu.NewReference(), *seed, progress)
		if err != nil {
			return err
		}
		endProgress()
		ok = metalcheck.Write(stdout, be.Device(), vs)
	case "cuda":
		be, err := cuda.Open()
		if err != nil {
			return err
		}
		defer be.Close()
		vs, err := cudacheck.SelfTest(be, cpu.NewReference(), *seed, progress)
		if err != nil {
			return err
		}
		endProgress()
		ok = cudacheck.Write(stdout, be.Device(), vs)
	default:
		return fmt.Errorf("checks a GPU backend: use --backend metal or --backend cuda (got %q)", *backend)
	}
	if !ok {
		return errors.New("some kernels disagree with the CPU reference (see the table)")
	}
	return nil
}
