package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/tools/train"
)

func newTrainDrafterCmd(g *globalFlags) *cobra.Command {
	var (
		o                      train.Options
		model, data, evalData  string
		evalPrompts, evalBeams string
		evalMaxTokens          int
		evalOnly               bool
	)
	cmd := &cobra.Command{
		Use:   "train-drafter --model PATH --data DIR --out DIR",
		Short: "Train a ReDrafter draft head on a distillation set made by distill",
		Long: `Train-drafter trains a draft head for the model on the model's own continuations (a directory
made by distill): teacher-forced over --predict positions as the reference trainer does, with the
model's final-norm hidden state as context, cross-entropy against the model's tokens plus
--kl-weight times the KL divergence to its distribution. AdamW, linear warm-up, cosine decay,
gradient clipping. DIR receives config.json and model.safetensors (load with generate --drafter)
and training_state.safetensors (for --resume) every --save-every steps and at the end.

With --eval-prompts, the trained head then decodes those prompts greedily (--eval-beams, each
WxL) and the tokens per step are reported; --eval-only does just that for the head in --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			beams, err := parseBeams(evalBeams)
			if err != nil {
				return err
			}
			switch {
			case evalOnly && evalPrompts == "":
				return errors.New("--eval-only needs --eval-prompts")
			case !evalOnly && data == "":
				return errors.New("--data is required")
			case o.Steps < 0 || o.Batch < 0 || o.Layers < 0 || o.ExitDim < 0 || o.Predict < 0:
				return errors.New("--steps, --batch, --layers, --exit-dim and --predict must not be negative")
			case o.EvalEvery < 0 || o.SaveEvery < 0 || o.EvalRows < 0 || evalMaxTokens < 0:
				return errors.New("--eval-every, --save-every, --eval-rows and --eval-max-tokens must not be negative")
			case !(o.LR > 0):
				return errors.New("--lr must be positive")
			case o.Warmup < 0 || o.Warmup >= 1:
				return errors.New("--warmup is a fraction of the steps, in [0, 1)")
			case o.KLWeight < 0 || o.WeightDecay < 0:
				return errors.New("--kl-weight and --weight-decay must not be negative")
			case !(o.Holdout > 0 && o.Holdout < 1):
				return errors.New("--holdout must be in (0, 1)")
			}
			if err := resolveModelPath(cmd, "--model", &model); err != nil {
				return err
			}
			var prompts []string
			if evalPrompts != "" {
				if prompts, err = train.ReadPrompts(evalPrompts); err != nil {
					return err
				}
			}
			if !evalOnly {
				if o.Data, err = train.ReadSet(data); err != nil {
					return err
				}
				if evalData != "" {
					if o.EvalData, err = train.ReadSet(evalData); err != nil {
						return err
					}
				}
			}
			e, err := redrafter.Load(model, redrafter.Options{Backend: g.backend})
			if err != nil {
				return err
			}
			defer e.Close()
			out := cmd.OutOrStdout()
			if !evalOnly {
				pl := newProgressLine(cmd.ErrOrStderr(), "train-drafter")
				o.Progress = func(p train.Progress) { showTrainProgress(pl, p) }
				rep, err := train.Train(cmd.Context(), e, o)
				pl.finish()
				if errors.Is(err, train.ErrStateExists) {
					return fmt.Errorf("%w: pass --resume to continue it", err)
				}
				if err != nil {
					return err
				}
				printReport(out, o.Out, rep)
			}
			if len(prompts) == 0 {
				return nil
			}
			if err := e.LoadDrafter(o.Out); err != nil {
				return err
			}
			m := train.NewMeasurer(e, prompts, evalMaxTokens)
			for _, b := range beams {
				r, err := m.Measure(cmd.Context(), b[0], b[1])
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "held-out prompts %s: %s\n", evalPrompts, r)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "the model the head drafts for: a .gguf file or an HF checkpoint directory (required)")
	f.StringVar(&data, "data", "", "distillation set made by distill (required unless --eval-only)")
	f.StringVar(&o.Out, "out", "", "checkpoint directory (required)")
	f.StringVar(&evalData, "eval-data", "", "held-out distillation set (default: hold out --holdout of --data's prompts)")
	f.Float64Var(&o.Holdout, "holdout", 0.05, "fraction of --data's prompts held out when there is no --eval-data")
	f.BoolVar(&o.Resume, "resume", false, "continue the training state in --out (same settings and data)")
	f.StringVar(&o.Init, "init", "", "start from this head's weights instead of random ones (fine-tuning, e.g. for a quantized model; same --layers and --exit-dim)")
	f.IntVar(&o.Steps, "steps", 2000, "optimiser steps")
	f.IntVar(&o.Batch, "batch", 512, "positions per step, each unrolled over --predict tokens")
	f.Float64Var(&o.LR, "lr", 1e-3, "peak learning rate")
	f.Float64Var(&o.Warmup, "warmup", 0.1, "fraction of the steps spent warming the learning rate up (then cosine decay)")
	f.Float64Var(&o.WeightDecay, "weight-decay", 0, "AdamW weight decay on matrices")
	f.Float64Var(&o.Clip, "clip", 1, "global gradient norm limit (negative: no clipping)")
	f.IntVar(&o.Layers, "layers", 2, "residual blocks in the head")
	f.IntVar(&o.ExitDim, "exit-dim", 0, "width of the residual blocks (0: twice the model's hidden size, no input projection)")
	f.IntVar(&o.Predict, "predict", 5, "positions predicted from each context (T; beams longer than T+1 draft beyond training)")
	f.Float64Var(&o.KLWeight, "kl-weight", 0, "weight of the KL divergence to the model's distribution, next to the cross-entropy")
	f.IntVar(&o.EvalEvery, "eval-every", 200, "steps between held-out evaluations")
	f.IntVar(&o.SaveEvery, "save-every", 500, "steps between checkpoints")
	f.IntVar(&o.EvalRows, "eval-rows", 8192, "held-out positions per evaluation")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the initial weights and the data order")
	f.StringVar(&evalPrompts, "eval-prompts", "", "after training, decode these held-out prompts greedily with the head and report tokens per step")
	f.StringVar(&evalBeams, "eval-beams", "4x5", "beam shapes for --eval-prompts: WxL[,WxL...]")
	f.IntVar(&evalMaxTokens, "eval-max-tokens", 256, "new tokens per --eval-prompts prompt")
	f.BoolVar(&evalOnly, "eval-only", false, "do not train: measure the head in --out on --eval-prompts")
	for _, name := range []string{"model", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// parseBeams parses "4x5,1x2" into (W, L) pairs.
func parseBeams(s string) ([][2]int, error) {
	var out [][2]int
	for _, item := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		ws, ls, ok := strings.Cut(item, "x")
		w, err1 := strconv.Atoi(ws)
		l, err2 := strconv.Atoi(ls)
		if !ok || err1 != nil || err2 != nil || w < 1 || l < 2 {
			return nil, fmt.Errorf("--eval-beams: %q is not WxL with W >= 1 and L >= 2", item)
		}
		out = append(out, [2]int{w, l})
	}
	if len(out) == 0 {
		return nil, errors.New("--eval-beams is empty")
	}
	return out, nil
}

func showTrainProgress(pl *progressLine, p train.Progress) {
	last := p.Done == p.Total
	if p.Phase == "context" {
		pl.update(last, fmt.Sprintf("context: the model's hidden states, %d/%d sequences · ETA %s", p.Done, p.Total, eta(p.ETA)),
			"phase", p.Phase, "done", p.Done, "total", p.Total, "eta", eta(p.ETA))
		if last {
			pl.finish()
		}
		return
	}
	line := fmt.Sprintf("step %d/%d · lr %.2e · loss %.3f · |g| %.2f", p.Done, p.Total, p.LR, p.Loss, p.GradNorm)
	attrs := []any{"step", p.Done, "steps", p.Total, "lr", p.LR, "loss", p.Loss, "grad_norm", p.GradNorm}
	if p.Eval != nil {
		line += fmt.Sprintf(" · %s (step %d)", p.Eval, p.Eval.Step)
		attrs = append(attrs, "eval_loss", p.Eval.Loss, "eval_acc", p.Eval.Acc)
	}
	rate := 0.0
	if s := p.Elapsed.Seconds(); s > 0 {
		rate = float64(p.Done) / s
	}
	line += fmt.Sprintf(" · %.1f steps/s · ETA %s", rate, eta(p.ETA))
	pl.update(last, line, append(attrs, "eta", eta(p.ETA))...)
}

func printReport(w io.Writer, dir string, r *train.Report) {
	c := r.Config
	fmt.Fprintf(w, "%s: draft head with %d parameters (%d residual blocks of width %d) for hidden size %d and %d tokens\n",
		dir, r.Params, c.NumDraftLayers, c.ExitDim, c.HiddenSize, c.VocabSize)
	fmt.Fprintf(w, "data: %d training sequences (%d tokens, %d positions), %d held out; the data agrees with the model's argmax at %.1f%% of tokens\n",
		r.TrainSeqs, r.TrainTokens, r.TrainRows, r.EvalSeqs, 100*r.TeacherAgreement)
	resumed := ""
	if r.ResumedFrom > 0 {
		resumed = fmt.Sprintf(", resumed from step %d", r.ResumedFrom)
	}
	fmt.Fprintf(w, "trained %d steps (%.1f epochs%s) in %s, after %s computing the model's hidden states\n",
		r.Steps, r.Epochs, resumed, r.TrainTime.Round(time.Second), r.ContextTime.Round(time.Millisecond))
	fmt.Fprintf(w, "%s\n", r.Final)
}
