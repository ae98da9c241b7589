package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// DistillOptions configure Distill.
type DistillOptions struct {
	Prompts     []string
	PromptsFile string // recorded in meta.json
	Model       string // recorded in meta.json
	// Template renders each prompt as a user turn of this built-in chat
	// template (tokenizer.RenderChat); "" uses the prompt as plain text.
	Template         string
	MaxTokens        int     // continuation length cap (0: until the context is full)
	Temperature      float32 // 0: greedy
	SamplesPerPrompt int     // continuations per prompt (> 1 needs a temperature)
	Seed             uint64  // sampling seed; each (prompt, sample) derives its own
	Batch            int     // continuations per shard (0: 64)
	// Speculative decodes with the engine's draft head (ReDrafter, beams of
	// BeamWidth x BeamLength; 0 for the backend's default) instead of
	// autoregressively. Greedy only: its outputs are then exactly the
	// autoregressive ones, sooner; sampled continuations would differ from
	// those of the same seed.
	Speculative           bool
	BeamWidth, BeamLength int
	// Progress, if set, is called after every continuation.
	Progress func(DistillProgress)
}

// DistillProgress is Distill's running count.
type DistillProgress struct {
	Done, Total int // continuations made in this run, and to make
	Resumed     int // continuations found in the directory
	Skipped     int // prompts too long for the context
	Tokens      int // continuation tokens made in this run
	// Steps counts this run's decoding steps: one a token autoregressively,
	// one a verification pass with Speculative.
	Steps   int
	Elapsed time.Duration
}

// ETA estimates the remaining time from the rate so far.
func (p DistillProgress) ETA() time.Duration {
	if p.Done == 0 {
		return 0
	}
	return time.Duration(float64(p.Elapsed) / float64(p.Done) * float64(p.Total-p.Done))
}

// Distill lets e continue every prompt and appends the token sequences to
// the distillation set in dir (see the package documentation), creating it
// if needed. It skips continuations already in dir, so an interrupted run
// resumes where it stopped; a directory made with other settings is
// refused. On cancellation the continuations made so far are written first.
func Distill(ctx context.Context, e *redrafter.Engine, dir string, o DistillOptions) (DistillProgress, error) {
	var prog DistillProgress
	switch {
	case len(o.Prompts) == 0:
		return prog, errors.New("train: no prompts to distill")
	case o.MaxTokens < 0:
		return prog, errors.New("train: negative max tokens")
	case o.Temperature < 0:
		return prog, errors.New("train: negative temperature")
	case o.SamplesPerPrompt < 1:
		return prog, errors.New("train: samples per prompt must be at least 1")
	case o.SamplesPerPrompt > 1 && o.Temperature == 0:
		return prog, errors.New("train: greedy decoding gives one continuation per prompt; sample more than one only with a temperature")
	case o.Speculative && o.Temperature != 0:
		return prog, errors.New("train: speculative distillation is greedy only: sampled continuations would differ from the autoregressive ones of the same seed")
	case o.Speculative && !hasHead(e):
		return prog, errors.New("train: speculative distillation needs a draft head loaded on the engine")
	}
	if o.Batch <= 0 {
		o.Batch = 64
	}
	meta := Meta{Format: Format, Model: o.Model, VocabSize: e.Model().Vocab, HiddenSize: e.Model().Dim,
		Prompts: o.PromptsFile, Template: o.Template, MaxTokens: o.MaxTokens, Temperature: o.Temperature,
		SamplesPerPrompt: o.SamplesPerPrompt, Seed: o.Seed}
	encode := func(i int) (string, []int32, redrafter.GenerateOptions, error) {
		opt := redrafter.GenerateOptions{MaxTokens: o.MaxTokens,
			Draft:    redrafter.DraftOptions{Off: !o.Speculative, BeamWidth: o.BeamWidth, BeamLength: o.BeamLength},
			Sampling: redrafter.Sampling{Temperature: o.Temperature, TopP: 1}}
		text := o.Prompts[i]
		if o.Template != "" {
			var err error
			text, err = tokenizer.RenderChat(o.Template, []tokenizer.Message{{Role: "user", Content: text}}, true)
			if err != nil {
				return "", nil, opt, fmt.Errorf("train: prompt %d: %w", i, err)
			}
			opt.ParseSpecial, opt.NoBOS = true, tokenizer.TemplateAddsBOS(o.Template)
		}
		if opt.ParseSpecial {
			return text, e.Tokenizer().EncodeSpecial(text, !opt.NoBOS), opt, nil
		}
		return text, e.Tokenizer().Encode(text, !opt.NoBOS), opt, nil
	}

	done := map[[2]int]bool{}
	next := 0 // next shard index
	if _, err := os.Stat(filepath.Join(dir, metaFile)); err == nil {
		set, err := ReadSet(dir)
		if err != nil {
			return prog, err
		}
		if d := set.Meta.diff(meta); len(d) > 0 {
			return prog, fmt.Errorf("train: %s was distilled with other settings: %s; use another directory", dir, strings.Join(d, ", "))
		}
		for _, r := range set.Records {
			if r.Prompt >= len(o.Prompts) {
				return prog, fmt.Errorf("train: %s holds prompt %d but the prompt file has %d", dir, r.Prompt, len(o.Prompts))
			}
			_, ids, _, err := encode(r.Prompt)
			if err != nil {
				return prog, err
			}
			if !slices.Equal(ids, r.Tokens[:r.PromptLen]) {
				return prog, fmt.Errorf("train: prompt %d differs from the one %s was distilled from; use another directory", r.Prompt, dir)
			}
			done[[2]int{r.Prompt, r.Sample}] = true
		}
		next = set.shards
		prog.Resumed = len(done)
	} else if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return prog, fmt.Errorf("train: %w", err)
		}
		raw, _ := json.MarshalIndent(meta, "", "  ")
		if err := writeAtomic(filepath.Join(dir, metaFile), append(raw, '\n')); err != nil {
			return prog, err
		}
	} else {
		return prog, fmt.Errorf("train: %w", err)
	}

	var todo [][2]int
	for i := range o.Prompts {
		for k := range o.SamplesPerPrompt {
			if !done[[2]int{i, k}] {
				todo = append(todo, [2]int{i, k})
			}
		}
	}
	prog.Total = len(todo)
	start := time.Now()
	var batch []Record
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := writeShard(dir, next, batch); err != nil {
			return err
		}
		next++
		batch = batch[:0]
		return nil
	}
	for _, ik := range todo {
		i, k := ik[0], ik[1]
		text, ids, opt, err := encode(i)
		if err != nil {
			return prog, errors.Join(err, flush())
		}
		if len(ids) >= e.Context() {
			prog.Skipped++
			prog.Total--
			continue
		}
		opt.Seed = mixSeed(o.Seed, uint64(i), uint64(k))
		res, err := e.Generate(ctx, text, opt, nil)
		if err != nil {
			return prog, errors.Join(err, flush())
		}
		batch = append(batch, Record{Prompt: i, Sample: k, PromptLen: len(ids),
			Tokens: append(slices.Clip(ids), res.Tokens...), Stop: string(res.Reason)})
		prog.Done++
		prog.Tokens += len(res.Tokens)
		if d := res.Stats.Draft; d != nil {
			prog.Steps += d.Steps
		} else {
			prog.Steps += len(res.Tokens)
		}
		prog.Elapsed = time.Since(start)
		if len(batch) >= o.Batch {
			if err := flush(); err != nil {
				return prog, err
			}
		}
		if o.Progress != nil {
			o.Progress(prog)
		}
	}
	return prog, flush()
}

func hasHead(e *redrafter.Engine) bool {
	_, ok := e.DraftHead()
	return ok
}

// mixSeed derives the seed of one continuation (splitmix64 steps), so a
// resumed run samples exactly what an uninterrupted one would.
func mixSeed(seed uint64, xs ...uint64) uint64 {
	z := seed
	for _, x := range xs {
		z += 0x9e3779b97f4a7c15 ^ x*0xbf58476d1ce4e5b9
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
	}
	return z
}
