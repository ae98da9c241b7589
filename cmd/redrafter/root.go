package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	_ "github.com/seed9b8f47b1/redrafter/backend/metal" // registers the metal backend (macOS); the API brings the cpu one
	"github.com/seed9b8f47b1/redrafter/envvar"
)

// globalFlags are shared by every command.
type globalFlags struct {
	backend  string
	threads  int
	logLevel string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "redrafter",
		Short:         "Run Llama-family models locally, faster with ReDrafter speculative decoding",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})))
			if g.threads < 0 {
				return fmt.Errorf("--threads must be positive")
			}
			if g.threads > 0 {
				runtime.GOMAXPROCS(g.threads)
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.backend, "backend", envvar.Backend.Or("auto"), "compute backend: auto, cpu, metal or cuda (env "+envvar.Backend.Name()+")")
	pf.IntVar(&g.threads, "threads", 0, "CPU threads (0: all cores)")
	pf.StringVar(&g.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	root.AddCommand(newGenerateCmd(g), newChatCmd(g), newInspectCmd(), newSelftestCmd(g), newDevicesCmd())
	root.AddCommand(newDistillCmd(g), newTrainDrafterCmd(g))
	root.AddCommand(newBenchCmd(g), newDevCmd())
	root.AddCommand(newQuantizeCmd(), newPerplexityCmd(g))
	return root
}
