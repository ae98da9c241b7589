package main

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
)

// newSelftestCmd answers the command that ran the GPU self-test, which
// moved to the developer program internal/cmd/gpucheck so that this
// binary links neither the op cases nor the fake devices it plans with.
func newSelftestCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "selftest",
		Short:  "Moved: the GPU self-test is go run ./internal/cmd/gpucheck in a clone",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("selftest moved out of redrafter: in a clone of the repository, run " +
				"`go run ./internal/cmd/gpucheck --backend metal` on a Mac or " +
				"`go run -tags cuda ./internal/cmd/gpucheck --backend cuda` with an NVIDIA GPU")
		},
	}
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
