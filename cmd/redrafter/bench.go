package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/apihooks"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/tools/bench"
)

func newBenchCmd(g *globalFlags) *cobra.Command {
	var (
		model, head, prompts, jsonOut, svgOut, template, profile, kvCache string
		maxTokens, limit, ctxLen, passesAfter                             int
		widths, lengths, passes, threads                                  []int
	)
	cmd := &cobra.Command{
		Use:   "bench --model PATH --drafter DIR --prompts FILE",
		Short: "Measure ReDrafter against autoregressive decoding over beam widths and lengths",
		Long: `Run autoregressive decoding and ReDrafter at every beam width W and length L
on each prompt (greedy; after a warm-up), check that both produce the same
tokens, and report tokens/s, speedup, tokens per step, tree compression and
the time split of a ReDrafter step, as a table, as JSON (--json) and as an
SVG heat map of the speedup over W × L (--svg).

Prompt files are JSON lines (.jsonl or .jsonl.gz) with a "turns" (the first
is used), "question" or "prompt" field, or text (.txt) with one prompt per
line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case maxTokens <= 0:
				return errors.New("--max-tokens must be positive")
			case limit < 0:
				return errors.New("--limit must not be negative")
			case len(widths) == 0 || len(lengths) == 0:
				return errors.New("--beam-width and --beam-length need at least one value each")
			}
			if err := checkInput("--prompts", prompts); err != nil {
				return err
			}
			if err := resolveModelPath(cmd, "--model", &model); err != nil {
				return err
			}
			if err := resolveDrafterPath(cmd, &head, model); err != nil {
				return err
			}
			ps, err := bench.ReadPrompts(prompts)
			if err != nil {
				return err
			}
			if limit > 0 && limit < len(ps) {
				ps = ps[:limit]
			}
			if len(threads) == 0 {
				threads = []int{runtime.GOMAXPROCS(0)}
			}
			for _, n := range threads {
				if n < 1 || n > maxThreads() {
					return fmt.Errorf("--threads %d: want 1 to %d (4× the %d CPUs)", n, maxThreads(), runtime.NumCPU())
				}
			}
			if profile != "" {
				f, err := os.Create(profile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			stderr := cmd.ErrOrStderr()
			table := cmd.OutOrStdout()
			if jsonOut == "-" {
				table = stderr
			}
			var reports []*bench.Report
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
			for i, n := range threads {
				// Each thread count loads anew: the CPU backend's worker
				// pool (Options.Threads) is sized when the engine opens it.
				// GOMAXPROCS follows, so that the report, the bandwidth
				// probe and the Go runtime see the same count.
				runtime.GOMAXPROCS(n)
				r, err := benchOnce(cmd, g.backend, model, head, n, ps, passes, passesAfter, ctxLen, kvCache,
					bench.Config{Widths: widths, Lengths: lengths, MaxTokens: maxTokens, Template: template})
				if err != nil {
					return err
				}
				if i > 0 {
					fmt.Fprintln(table)
				}
				if err := r.WriteTable(table); err != nil {
					return err
				}
				reports = append(reports, r)
			}
			if len(reports) > 1 {
				fmt.Fprintln(table)
				if err := bench.WriteScaling(table, reports); err != nil {
					return err
				}
			}
			if jsonOut != "" {
				write := reports[0].WriteJSON
				if len(reports) > 1 {
					write = func(w io.Writer) error { return bench.WriteJSONs(w, reports) }
				}
				if err := writeOut(cmd.OutOrStdout(), jsonOut, write); err != nil {
					return err
				}
			}
			if svgOut != "" {
				if err := writeOut(cmd.OutOrStdout(), svgOut, reports[len(reports)-1].WriteSVG); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model: a .gguf file or an HF checkpoint directory (required)")
	f.StringVar(&head, "drafter", "", "ReDrafter draft head directory (required)")
	f.StringVar(&prompts, "prompts", "", "prompt file: .jsonl, .jsonl.gz or .txt (required)")
	f.IntVar(&maxTokens, "max-tokens", 128, "new tokens per prompt")
	f.IntSliceVar(&widths, "beam-width", []int{1, 2, 4}, "beam widths W to sweep")
	f.IntSliceVar(&lengths, "beam-length", []int{3, 4, 5}, "beam lengths L to sweep (the init token plus L-1 drafts)")
	f.IntVar(&limit, "limit", 0, "use only the first N prompts (0: all)")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file (-: stdout, the table then goes to stderr)")
	f.StringVar(&svgOut, "svg", "", "draw the speedup heat map over W × L to this SVG file")
	f.StringVar(&template, "template", "none", "render prompts as a user turn: none (raw text), vicuna, llama2, chatml or llama3")
	f.IntSliceVar(&passes, "passes", nil, "also time one forward pass over each of these numbers of tokens (e.g. 1,3,5,9,17), the cost of verification")
	f.IntVar(&passesAfter, "passes-after", 64, "tokens in the cache before each timed --passes pass (attention cost grows with it)")
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the runs (warm-up included) to this file")
	f.IntVar(&ctxLen, "context", 0, "maximum tokens in the context (0: the model's)")
	f.StringVar(&kvCache, "kv-cache", "", "KV cache element type: f32 or f16 (default f16 on a GPU, f32 on the CPU)")
	f.IntSliceVar(&threads, "threads", nil, "CPU threads; several (1,2,4) run the whole benchmark once per count and add a scaling table (default: all cores)")
	for _, name := range []string{"model", "drafter", "prompts"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// benchOnce loads the model and its head, runs the benchmark with threads
// CPU workers, measuring the read bandwidth in the same run on the CPU, and
// closes the engine.
func benchOnce(cmd *cobra.Command, backend, model, head string, threads int, ps []bench.Prompt, passes []int, passesAfter, ctxLen int,
	kvCache string, cfg bench.Config) (*bench.Report, error) {
	e, err := redrafter.Load(model, redrafter.Options{Backend: backend, Context: ctxLen, KVCache: kvCache, Threads: threads})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := e.LoadDrafter(head); err != nil {
		return nil, err
	}
	if e.Backend() == "cpu" {
		cfg.ReadBandwidth = func(ctx context.Context) (float64, error) { return apihooks.HostReadBandwidth(ctx, threads) }
	} else if probe := apihooks.DeviceReadBandwidth(e); probe != nil {
		cfg.ReadBandwidth = probe // a GPU's own memory (CUDA)
	}
	pl := newProgressLine(cmd.ErrOrStderr(), fmt.Sprintf("bench (%d threads)", threads))
	cfg.Progress = func(done, total int, what string) {
		pl.update(done == total, fmt.Sprintf("[%d/%d] %s", done, total, what), "done", done, "total", total, "run", what)
	}
	r, err := bench.Run(cmd.Context(), e, ps, cfg)
	pl.finish()
	if err != nil {
		return nil, err
	}
	if len(passes) > 0 {
		if r.Passes, err = bench.MeasurePasses(e, passes, passesAfter, 10); err != nil {
			return nil, err
		}
	}
	r.Model.Path, r.Drafter.Path = model, head
	r.Model.InflatedFrom = inflatedFrom(model)
	return r, nil
}

// writeOut writes with write to path, or to stdout when path is "-".
func writeOut(stdout io.Writer, path string, write func(io.Writer) error) error {
	if path == "-" {
		return write(stdout)
	}
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// inflatedFrom reads the original shape that redrafter dev inflate records
// in a GGUF file ("" for any other model).
func inflatedFrom(path string) string {
	if !strings.HasSuffix(path, ".gguf") {
		return ""
	}
	g, err := formats.OpenGGUF(path)
	if err != nil {
		return ""
	}
	defer g.Close()
	s, _ := g.String("redrafter.inflate.source_shape")
	return s
}
