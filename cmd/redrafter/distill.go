package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/tools/train"
)

func newDistillCmd(g *globalFlags) *cobra.Command {
	var (
		model, prompts, out, template, head string
		maxTokens, samples, batch           int
		beamWidth, beamLength               int
		temperature                         float32
		seed                                uint64
	)
	cmd := &cobra.Command{
		Use:   "distill --model PATH --prompts FILE --out DIR",
		Short: "Make a distillation set: the model's own continuations of a set of prompts, for train-drafter",
		Long: `Distill lets the model continue every prompt (greedily, or sampled at --temperature) and
stores the token sequences in DIR: meta.json and shard-NNNNN.jsonl files, one line per
continuation ({"prompt", "sample", "prompt_len", "tokens", "stop"}). Rerunning the same command
resumes: continuations already in DIR are skipped.

--drafter HEAD makes greedy continuations with ReDrafter: the same tokens as autoregressive
decoding (greedy ReDrafter is exact), in a fraction of the time on a large model. Any head for
the model will do, an earlier one or one made for another quantization of it; a better head only
makes it faster.

FILE is plain text with one prompt per line ("\n" stands for a newline), or JSONL whose objects
carry the prompt in "turns" (the first turn), "question" or "prompt".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case maxTokens < 0:
				return errors.New("--max-tokens must not be negative")
			case temperature < 0:
				return errors.New("--temperature must not be negative")
			case samples < 1:
				return errors.New("--samples-per-prompt must be at least 1")
			case samples > 1 && temperature == 0:
				return errors.New("--samples-per-prompt > 1 needs --temperature > 0: greedy continuations are all the same")
			case batch < 1:
				return errors.New("--batch must be at least 1")
			case head != "" && temperature != 0:
				return errors.New("--drafter makes greedy continuations only (--temperature 0): sampled ones would differ from autoregressive sampling of the same seed")
			case head == "" && (beamWidth != 0 || beamLength != 0):
				return errors.New("--beam-width and --beam-length need --drafter")
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
			ps, err := train.ReadPrompts(prompts)
			if err != nil {
				return err
			}
			e, err := redrafter.Load(model, redrafter.Options{Backend: g.backend})
			if err != nil {
				return err
			}
			defer e.Close()
			if head != "" {
				if err := e.LoadDrafter(head); err != nil {
					return err
				}
			}
			tmpl := ""
			if template != "" && template != "none" {
				if tmpl, err = chooseBuiltinTemplate(template, e.ChatTemplate); err != nil {
					return err
				}
			}
			pl := newProgressLine(cmd.ErrOrStderr(), "distill")
			res, err := train.Distill(cmd.Context(), e, out, train.DistillOptions{
				Prompts: ps, PromptsFile: prompts, Model: model, Template: tmpl, MaxTokens: maxTokens,
				Temperature: temperature, SamplesPerPrompt: samples, Seed: seed, Batch: batch,
				Speculative: head != "", BeamWidth: beamWidth, BeamLength: beamLength,
				Progress: func(p train.DistillProgress) {
					rate := float64(p.Tokens) / max(p.Elapsed.Seconds(), 1e-9)
					msg := fmt.Sprintf("distill %d/%d continuations · %s tokens · %.0f tokens/s", p.Done, p.Total, count(p.Tokens), rate)
					attrs := []any{"done", p.Done, "total", p.Total, "tokens", p.Tokens, "tokens_per_s", int(rate)}
					if head != "" {
						perStep := float64(p.Tokens) / float64(max(p.Steps, 1))
						msg += fmt.Sprintf(" · %.2f tokens/step", perStep)
						attrs = append(attrs, "tokens_per_step", fmt.Sprintf("%.2f", perStep))
					}
					pl.update(p.Done == p.Total, msg+" · ETA "+eta(p.ETA()), append(attrs, "eta", eta(p.ETA()))...)
				},
			})
			pl.finish()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d continuations (%s tokens) in %s; %d were already there, %d prompts too long for the context\n",
				out, res.Done, count(res.Tokens), res.Elapsed.Round(time.Millisecond), res.Resumed, res.Skipped)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model: a .gguf file or an HF checkpoint directory (required)")
	f.StringVar(&prompts, "prompts", "", "prompt file: .txt, one per line, or .jsonl with turns/question/prompt (required)")
	f.StringVar(&out, "out", "", "output directory (required); rerun to resume")
	f.IntVar(&maxTokens, "max-tokens", 256, "new tokens per continuation (0: until the context is full)")
	f.Float32Var(&temperature, "temperature", 0, "sampling temperature (0: greedy, the distillation for greedy decoding)")
	f.IntVar(&samples, "samples-per-prompt", 1, "continuations per prompt (more than one needs a temperature)")
	f.Uint64Var(&seed, "seed", 1, "sampling seed (each continuation derives its own, so resumed runs match)")
	f.StringVar(&template, "template", "", "render each prompt as a user turn: vicuna, llama2, chatml, llama3 or auto (default: plain text)")
	f.IntVar(&batch, "batch", 64, "continuations per shard file")
	f.StringVar(&head, "drafter", "", "ReDrafter draft head directory: greedy continuations made speculatively (the same tokens, sooner)")
	f.IntVar(&beamWidth, "beam-width", 0, "ReDrafter beams per step with --drafter (0: the backend's default)")
	f.IntVar(&beamLength, "beam-length", 0, "ReDrafter tokens per beam with --drafter (0: the backend's default)")
	for _, name := range []string{"model", "prompts", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func eta(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}

// count prints n with a K or M suffix.
func count(n int) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
