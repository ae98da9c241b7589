package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/tools/inflate"
	"github.com/seed9b8f47b1/redrafter/internal/tools/train"
)

// newDevCmd groups tools for developing and benchmarking redrafter itself.
func newDevCmd(g *globalFlags) *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Developer tools (benchmark models)",
		Args:  cobra.NoArgs,
	}
	dev.AddCommand(newInflateCmd(), newDeflateCmd(), newLoadtestCmd(), newOpeningsCmd(g), newRandomModelCmd(), newLogitsCmd(g))
	return dev
}

func newOpeningsCmd(g *globalFlags) *cobra.Command {
	var (
		model, data, out string
		minNew, maxNew   int
		seed             uint64
	)
	cmd := &cobra.Command{
		Use:   "openings --model PATH --data DIR --out FILE.jsonl|FILE.txt",
		Short: "Cut new prompts from a sampled distillation set, for more distinct training text",
		Long: `Write one prompt per continuation of the distillation set DIR: its tokens
cut after --min-new…--max-new generated ones (drawn per continuation) and
decoded with the model's tokenizer, repeats dropped, as a prompt file
distill reads: JSONL ({"prompt": ...}) or text, one per line with newlines
written "\n" (openings that hold a literal "\n" are left out of a text
file), which can be appended to another prompt file. Made from sampled continuations
(distill --temperature 0.8 --samples-per-prompt 2) and distilled greedily,
they add distinct contexts with greedy labels to a head's training set
(README, "A head for a 4-bit model").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if minNew < 0 || maxNew < minNew {
				return fmt.Errorf("--min-new %d, --max-new %d: want 0 ≤ min ≤ max", minNew, maxNew)
			}
			if !strings.HasSuffix(out, ".jsonl") && !strings.HasSuffix(out, ".txt") {
				return fmt.Errorf("--out %q: want a .jsonl or .txt file", out)
			}
			if err := checkModelPath("--model", model); err != nil {
				return err
			}
			set, err := train.ReadSet(data)
			if err != nil {
				return err
			}
			e, err := redrafter.Load(model, redrafter.Options{Backend: g.backend})
			if err != nil {
				return err
			}
			defer e.Close()
			if v := e.Model().Vocab; v != set.Meta.VocabSize {
				return fmt.Errorf("%s was made by a model with %d tokens, %s has %d", data, set.Meta.VocabSize, model, v)
			}
			written, err := train.WritePrompts(out, train.Openings(set, e.Tokenizer().Decode, minNew, maxNew, seed))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d openings from %d continuations\n", out, written, len(set.Records))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "the model that made the set (its tokenizer decodes the tokens; required)")
	f.StringVar(&data, "data", "", "distillation set made by distill, sampled (required)")
	f.StringVar(&out, "out", "", "the prompt file to write (.jsonl or .txt, required)")
	f.IntVar(&minNew, "min-new", 8, "fewest generated tokens an opening keeps")
	f.IntVar(&maxNew, "max-new", 64, "most generated tokens an opening keeps")
	f.Uint64Var(&seed, "seed", 1, "seed of the cut points")
	for _, name := range []string{"model", "data", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func newDeflateCmd() *cobra.Command {
	var big, small, out string
	cmd := &cobra.Command{
		Use:   "deflate --model INFLATED --like SMALL.gguf --out OUT.gguf",
		Short: "Cut an inflated model (quantized since, perhaps) back to the shape it was inflated from",
		Long: `Write the model of SMALL's shape whose weights are INFLATED's at the
coordinates inflate put SMALL's (the norm and query scaling undone), as an
f32 GGUF with SMALL's metadata. INFLATED may have been converted or
quantized after inflate (a 4-bit directory from quantize): its padding stays
exactly zero, so OUT computes what INFLATED computes, up to the order of
sums, at the small model's speed. The use: distil a quantized inflated
model's continuations in seconds rather than hours, train a head on OUT,
and inflate the head back (README, "A head for a 4-bit model").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			if err := inflate.DeflateContext(cmd.Context(), big, small, out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s cut back to the shape of %s (%.1fs)\n", out, big, small, time.Since(start).Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&big, "model", "", "the inflated model (.gguf or HF directory, quantized or not; required)")
	f.StringVar(&small, "like", "", "the .gguf model it was inflated from (required)")
	f.StringVar(&out, "out", "", "the deflated model (.gguf, required)")
	for _, name := range []string{"model", "like", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func newInflateCmd() *cobra.Command {
	var (
		model, head, out, headOut, dtype string
		shape                            = inflate.TinyLlama
		seed                             uint64
		exitDim                          int
	)
	cmd := &cobra.Command{
		Use:   "inflate --model IN.gguf [--drafter DIR] --out OUT.gguf [--drafter-out DIR]",
		Short: "Pad a model and its draft head to a larger shape that computes the same logits",
		Long: `Pad a model (and its ReDrafter draft head) to a real model's shape so that it
computes the same function at the cost of the larger one: zero-padded hidden,
head and FFN dimensions, extra layers whose output projections are zero (their
other weights are random, so they cost real work), RMSNorm weights and epsilon
rescaled for the wider mean, heads embedded so that RoPE frequencies and the
attention scale are preserved. The default shape is TinyLlama-1.1B's. The
vocabulary is not padded (that would change the function), so the inflated
model moves fewer bytes per token than a real one with a 32k vocabulary.
--drafter-exit-dim narrows the head's blocks behind an input projection
(the cost of a narrower head; what it drafts is unchanged).
The file is written beside OUT and renamed into place; Ctrl-C stops the
work, removes it, and exits with status 130.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var dt graph.DType
			switch strings.ToLower(dtype) {
			case "f16":
				dt = graph.F16
			case "f32":
				dt = graph.F32
			default:
				return fmt.Errorf("--dtype %q: want f16 or f32", dtype)
			}
			if headOut != "" && head == "" {
				return errors.New("--drafter-out needs --drafter")
			}
			if head != "" && headOut == "" {
				headOut = strings.TrimSuffix(out, ".gguf") + "-drafter"
			}
			if out == model {
				return errors.New("--out must differ from --model")
			}
			if err := checkModelPath("--model", model); err != nil {
				return err
			}
			var h *drafter.Head
			if head != "" {
				// Refuse a wrong head before the long part.
				var err error
				if h, err = drafter.Load(head); err != nil {
					return err
				}
				defer h.Close()
				ck, err := llama.Open(model)
				if err != nil {
					return err
				}
				err = h.Check(ck.Model.Config)
				ck.Close()
				if err != nil {
					return fmt.Errorf("%w (%s)", err, head)
				}
				if _, err := inflate.HeadExit(h.Config, shape.Dim, exitDim); err != nil {
					return fmt.Errorf("--drafter-exit-dim: %w", err)
				}
			}
			start := time.Now()
			pl := newProgressLine(cmd.ErrOrStderr(), "inflate")
			p, err := inflate.ModelContext(cmd.Context(), model, out, shape, inflate.Options{DType: dt, Seed: seed,
				Progress: func(done, total int, name string) {
					line := fmt.Sprintf("inflate: [%d/%d] %s", done, total, name)
					if done == total {
						line = fmt.Sprintf("inflate: %d tensors built, writing %s", total, out)
					}
					pl.update(done == total, line, "done", done, "total", total, "tensor", name)
				}})
			pl.finish()
			if err != nil {
				return err
			}
			if err := cmd.Context().Err(); err != nil {
				return err // Ctrl-C after the model was written: the head is not started
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%s: %v → %v (%s), original layers at %v, rms eps %g → %g (%.1fs)\n", out,
				inflate.ShapeOf(p.From), shape, strings.ToLower(dtype), p.LayerAt, p.From.NormEps, p.To.NormEps, time.Since(start).Seconds())
			if h != nil {
				nh, err := p.Head(h, dt, exitDim)
				if err != nil {
					return err
				}
				if err := nh.Save(headOut); err != nil {
					return err
				}
				fmt.Fprintf(w, "%s: draft head padded to hidden size %d, exit width %d\n", headOut, p.To.Dim, nh.Config.ExitDim)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model to inflate (.gguf, required)")
	f.StringVar(&head, "drafter", "", "its draft head directory, inflated alongside")
	f.StringVar(&out, "out", "", "inflated model (.gguf, required)")
	f.StringVar(&headOut, "drafter-out", "", "inflated draft head directory (default: OUT without .gguf, plus -drafter)")
	f.IntVar(&exitDim, "drafter-exit-dim", 0, "the inflated head's exit width (its blocks' width), reached through an input projection; 0: twice the hidden size, or the head's own when it has an input projection")
	f.IntVar(&shape.Dim, "dim", shape.Dim, "hidden size")
	f.IntVar(&shape.Heads, "heads", shape.Heads, "query heads (head size = dim / heads)")
	f.IntVar(&shape.KVHeads, "kv-heads", shape.KVHeads, "key/value heads")
	f.IntVar(&shape.Layers, "layers", shape.Layers, "transformer blocks")
	f.IntVar(&shape.FFN, "ffn", shape.FFN, "FFN intermediate size")
	f.StringVar(&dtype, "dtype", "f16", "weight type of the matrices: f16 or f32")
	f.Uint64Var(&seed, "seed", 1, "seed of the extra layers' random weights")
	_ = cmd.MarkFlagRequired("model")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
