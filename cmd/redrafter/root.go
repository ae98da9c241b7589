package main

import (
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	_ "github.com/seed9b8f47b1/redrafter/backend/metal" // registers the metal backend (macOS); the API brings the cpu one
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// globalFlags are shared by every command.
type globalFlags struct {
	backend  string
	threads  int
	logLevel string
}

// maxThreads bounds --threads: more Go threads than this only add
// scheduling overhead, and a huge number exhausts the OS's threads.
func maxThreads() int { return 4 * runtime.NumCPU() }

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "redrafter",
		Short:         "Run Llama-family models locally, faster with ReDrafter speculative decoding",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl})))
			if g.threads < 0 || g.threads > maxThreads() {
				return fmt.Errorf("--threads %d: want 1 to %d (4× the %d CPUs), or 0 for all cores", g.threads, maxThreads(), runtime.NumCPU())
			}
			if g.threads > 0 {
				runtime.GOMAXPROCS(g.threads)
			}
			return nil
		},
	}
	root.SetVersionTemplate("redrafter {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&g.backend, "backend", envvar.Backend.Or("auto"), "compute backend: auto, cpu, metal or cuda (env "+envvar.Backend.Name()+")")
	pf.IntVar(&g.threads, "threads", 0, fmt.Sprintf("CPU threads, at most 4× the CPUs (%d here) (0: all cores)", maxThreads()))
	pf.StringVar(&g.logLevel, "log-level", "info", "log level on stderr: debug, info (progress of long commands), warn or error")
	root.AddCommand(newGenerateCmd(g), newChatCmd(g), newServeCmd(g), newInspectCmd(), newSelftestCmd(), newDevicesCmd())
	root.AddCommand(newDistillCmd(g), newTrainDrafterCmd(g))
	root.AddCommand(newBenchCmd(g), newDevCmd(g))
	root.AddCommand(newQuantizeCmd(), newPerplexityCmd(g))
	root.AddCommand(newPullCmd(), newListCmd(), newRmCmd())
	return root
}

// version is the module version this binary was built from, with the VCS
// commit when the build recorded one ("devel" for a plain go build outside
// a repository).
func version() string {
	v := "devel"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if mv := info.Main.Version; mv != "" && mv != "(devel)" {
		v = mv
	}
	var commit, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit != "" {
		v += " (commit " + commit + modified + ")"
	}
	return v + " " + info.GoVersion
}
