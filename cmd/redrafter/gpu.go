package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
)

// endProgress ends selftest's progress line on a terminal.
func endProgress() {
	if term.IsTerminal(int(os.Stderr.Fd())) {
		fmt.Fprintln(os.Stderr)
	}
}

func newSelftestCmd(g *globalFlags) *cobra.Command {
	var seed uint64
	cmd := &cobra.Command{
		Use:   "selftest --backend metal|cuda",
		Short: "Run every GPU kernel once against the CPU reference and print a verdict per kernel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			progress := func(done, total int) {}
			if term.IsTerminal(int(os.Stderr.Fd())) {
				progress = func(done, total int) { fmt.Fprintf(os.Stderr, "\rselftest: %d/%d cases", done, total) }
			}
			var ok bool
			switch g.backend {
			case "metal":
				be, err := metal.Open()
				if err != nil {
					return err
				}
				defer be.Close()
				vs, err := metal.SelfTest(be, seed, progress)
				if err != nil {
					return err
				}
				endProgress()
				ok = metal.WriteSelfTest(cmd.OutOrStdout(), be.Device(), vs)
			case "cuda":
				be, err := cuda.Open()
				if err != nil {
					return err
				}
				defer be.Close()
				vs, err := cuda.SelfTest(be, seed, progress)
				if err != nil {
					return err
				}
				endProgress()
				ok = cuda.WriteSelfTest(cmd.OutOrStdout(), be.Device(), vs)
			default:
				return fmt.Errorf("selftest checks a GPU backend: use --backend metal or --backend cuda (got %q)", g.backend)
			}
			if !ok {
				return errors.New("selftest: some kernels disagree with the CPU reference (see the table)")
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the random inputs")
	return cmd
}

func newDevicesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "devices",
		Short: "List the CPU, and the GPUs (Metal on macOS, CUDA in a -tags cuda build) with their memory and recommended ReDrafter beam",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			writeCPU(out, readCPUInfo())
			rs, err := metal.Devices()
			switch {
			case err == nil:
				metal.WriteDevices(out, rs)
			case runtime.GOOS == "darwin":
				// The CPU still runs every model; say why there is no GPU.
				fmt.Fprintf(out, "metal: none (%v)\n", err)
			}
			if runtime.GOOS == "linux" {
				if infos, err := cuda.Devices(); err == nil {
					cuda.WriteDevices(out, infos)
				} else {
					fmt.Fprintf(out, "cuda: none (%v)\n", err)
				}
			}
			return nil
		},
	}
}
