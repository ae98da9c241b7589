package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/tools/convert"
)

func newQuantizeCmd() *cobra.Command {
	var (
		in, out string
		opt     = convert.Options{Bits: 4, GroupSize: 64}
		keep    string
	)
	cmd := &cobra.Command{
		Use:   "quantize --in PATH --out DIR [--bits 4|8] [--group-size 32|64|128] [--keep-fp16 lm_head,embed]",
		Short: "Quantize a model or a draft head to MLX's affine 4- or 8-bit layout",
		Long: `Quantize a model (an HF checkpoint directory or a .gguf file) or a ReDrafter
draft head directory into an HF-style directory in MLX's affine layout, as
mlx-community checkpoints are: each quantized matrix becomes <path>.weight
(packed uint32 codes), <path>.scales and <path>.biases (f16), and config.json
gains a "quantization" block. Quantization is round-to-nearest with a scale
and bias from each group's min and max, as MLX does. Matrices whose rows are
not whole groups, and those named by --keep-fp16, stay in f16. --bits 16 or 32
converts without quantizing. The output is written beside DIR and renamed
into place, so nothing is left half written on an error or Ctrl-C (which
exits with status 130). --force replaces an earlier output (a directory
with config.json and model.safetensors), never a directory of other files,
and only its checkpoint files (config, weights, tokenizer): its other files
(README, NOTES.md, LICENSE) stay. The output is never the input.
generate --model and --drafter read the result.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if keep != "" {
				opt.Keep = strings.Split(keep, ",")
			}
			if _, err := os.Stat(in); err != nil {
				return fmt.Errorf("--in %s: %w", in, plainErr(err))
			}
			pl := newProgressLine(cmd.ErrOrStderr(), "quantize")
			opt.Progress = func(done, total int, name, what string) {
				pl.update(done == total, fmt.Sprintf("quantize: [%d/%d] %s (%s)", done, total, name, what),
					"done", done, "total", total, "tensor", name, "as", what)
			}
			start := time.Now()
			what := "model"
			run := convert.ModelContext
			if convert.IsHead(in) {
				what, run = "draft head", convert.HeadContext
			}
			sum, err := run(cmd.Context(), in, out, opt)
			pl.finish()
			switch {
			case errors.Is(err, convert.ErrExists):
				return fmt.Errorf("%w: pass --force to replace it", err)
			case errors.Is(err, convert.ErrOutputIsInput):
				return fmt.Errorf("%w: --out would replace --in: choose another --out", err)
			case errors.Is(err, convert.ErrNotOutput):
				return fmt.Errorf("%w; --force replaces only an earlier output of quantize: choose another --out", err)
			case err != nil:
				return err
			}
			mode := fmt.Sprintf("%d-bit, groups of %d", opt.Bits, opt.GroupSize)
			if opt.Bits >= 16 {
				mode = fmt.Sprintf("f%d", opt.Bits)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "quantize: %s %s -> %s (%s): %d matrices, %d quantized, %.1f MiB in %.1fs\n",
				what, in, out, mode, sum.Tensors, sum.Quantized, float64(sum.Bytes)/(1<<20), time.Since(start).Seconds())
			if len(sum.Skipped) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "quantize: kept in f16 (rows are not whole groups of %d): %s\n",
					opt.GroupSize, strings.Join(sum.Skipped, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&in, "in", "", "model (.gguf file or HF directory) or draft head directory to quantize (required)")
	f.StringVar(&out, "out", "", "output directory (required)")
	f.IntVar(&opt.Bits, "bits", opt.Bits, "bits per weight: 4 or 8 (16 or 32: convert without quantizing)")
	f.IntVar(&opt.GroupSize, "group-size", opt.GroupSize, "weights per scale and bias: 32, 64 or 128")
	f.StringVar(&keep, "keep-fp16", "", "comma-separated matrices to keep in f16: lm_head, embed, vocab (a draft head's), module paths (model.layers.0.mlp.down_proj) or their last part (down_proj); a name that matches no matrix is an error")
	f.BoolVar(&opt.Force, "force", false, "replace an existing output directory written by quantize (a directory of other files is refused)")
	for _, name := range []string{"in", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// storySeparator ends each text of a perplexity file, as in TinyStories.
const storySeparator = "<|endoftext|>"

func newPerplexityCmd(g *globalFlags) *cobra.Command {
	var (
		model, textFile string
		sampleN         int
		seed            uint64
		maxTokens       int
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "perplexity --model PATH --text FILE [--sample N [--seed S] [--max-tokens T]]",
		Short: "Measure a model's perplexity on held-out text",
		Long: `Measure a model's perplexity on the texts of FILE (separated by
` + storySeparator + ` lines): each text, with BOS prepended, is scored from
an empty context, and the perplexity is exp of the mean negative
log-likelihood of every token after the first.

With --sample N, the model first writes N texts of its own (temperature 1,
from an empty prompt, seeds S, S+1, ...) to FILE and then scores them:
stories the model samples itself serve as held-out text when none is at
hand, and scoring other versions of the model (quantized, f16) on that file
measures what they lost.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := resolveModelPath(cmd, "--model", &model); err != nil {
				return err
			}
			if sampleN == 0 {
				if err := checkInput("--text", textFile); err != nil {
					return err
				}
			}
			e, err := redrafter.Load(model, redrafter.Options{Backend: g.backend})
			if err != nil {
				return err
			}
			defer e.Close()
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if sampleN > 0 {
				var b strings.Builder
				for i := range sampleN {
					res, err := e.Generate(ctx, "", redrafter.GenerateOptions{MaxTokens: maxTokens,
						Sampling: redrafter.Sampling{Temperature: 1, TopP: 1}, Seed: seed + uint64(i),
						Draft: redrafter.DraftOptions{Off: true}}, nil)
					if err != nil {
						return err
					}
					b.WriteString(strings.TrimSpace(res.Text))
					b.WriteString("\n" + storySeparator + "\n")
				}
				if err := os.WriteFile(textFile, []byte(b.String()), 0o644); err != nil {
					return err
				}
			}
			raw, err := os.ReadFile(textFile)
			if err != nil {
				return err
			}
			var seqs [][]int32
			for _, t := range strings.Split(string(raw), storySeparator) {
				if t = strings.TrimSpace(t); t != "" {
					seqs = append(seqs, e.Tokenizer().Encode(t, true))
				}
			}
			if len(seqs) == 0 {
				return errors.New("perplexity: the text file has no texts")
			}
			start := time.Now()
			p, err := e.Perplexity(ctx, seqs, 0)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"model": model, "text": textFile,
					"perplexity": p.Value(), "tokens": p.Tokens, "sequences": p.Sequences, "nll": p.NLL})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "perplexity %.4f over %d tokens in %d texts (%s, %.1fs)\n",
				p.Value(), p.Tokens, p.Sequences, model, time.Since(start).Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model: a .gguf file or an HF checkpoint directory (required)")
	f.StringVar(&textFile, "text", "", "text file, texts separated by "+storySeparator+" lines (required; written first with --sample)")
	f.IntVar(&sampleN, "sample", 0, "first write N texts sampled from the model at temperature 1 to --text")
	f.Uint64Var(&seed, "seed", 1, "seed of the first sampled text (--sample)")
	f.IntVar(&maxTokens, "max-tokens", 256, "longest sampled text in tokens (--sample)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	for _, name := range []string{"model", "text"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
