package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/sample"
)

// modelFlags are the flags of commands that load a model and generate.
type modelFlags struct {
	model       string
	context     int
	kvCache     string
	maxTokens   int
	temperature float32
	topK        int
	topP        float32
	seed        int64
	stops       []string
	drafter     string
	beamWidth   int
	beamLength  int
	accept      string
}

func (m *modelFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.model, "model", "", "model: a .gguf file or an HF checkpoint directory (required)")
	f.IntVar(&m.context, "context", 0, "maximum tokens in the context (0: the model's)")
	f.StringVar(&m.kvCache, "kv-cache", "f32", "KV cache element type: f32, or f16 for half the memory (keys and values rounded to halves)")
	f.IntVar(&m.maxTokens, "max-tokens", 256, "stop after this many new tokens (0: until the context is full)")
	f.Float32Var(&m.temperature, "temperature", 0, "sampling temperature (0: greedy)")
	f.IntVar(&m.topK, "top-k", 0, "sample from the k most likely tokens only (0: all)")
	f.Float32Var(&m.topP, "top-p", 1, "sample from the smallest set of tokens with this much probability")
	f.Int64Var(&m.seed, "seed", -1, "random seed for sampling (-1: a fresh one each run)")
	f.StringArrayVar(&m.stops, "stop", nil, "stop before this text (repeatable)")
	f.StringVar(&m.drafter, "drafter", "", "ReDrafter draft head directory (config.json + model.safetensors): speculative decoding")
	f.IntVar(&m.beamWidth, "beam-width", 0, "ReDrafter beams per step, 1-50 (0: the backend's default)")
	f.IntVar(&m.beamLength, "beam-length", 0, "ReDrafter tokens per beam including the last accepted one, >= 2 (0: the backend's default)")
	f.StringVar(&m.accept, "accept", "exact", "ReDrafter acceptance when sampling: exact (keeps the model's distribution) or apple (the reference rule, biased)")
	_ = cmd.MarkFlagRequired("model")
}

func (m *modelFlags) options() (redrafter.GenerateOptions, error) {
	switch {
	case m.maxTokens < 0:
		return redrafter.GenerateOptions{}, errors.New("--max-tokens must not be negative")
	case m.temperature < 0:
		return redrafter.GenerateOptions{}, errors.New("--temperature must not be negative")
	case m.topK < 0:
		return redrafter.GenerateOptions{}, errors.New("--top-k must not be negative")
	case !(m.topP > 0 && m.topP <= 1):
		return redrafter.GenerateOptions{}, errors.New("--top-p must be in (0, 1]")
	}
	seed := uint64(m.seed)
	if m.seed < 0 {
		seed = randomSeed()
	}
	return redrafter.GenerateOptions{
		MaxTokens: m.maxTokens,
		Sampling:  sample.Params{Temperature: m.temperature, TopK: m.topK, TopP: m.topP},
		Seed:      seed,
		Stop:      m.stops,
		Draft:     redrafter.DraftOptions{BeamWidth: m.beamWidth, BeamLength: m.beamLength, Accept: m.accept},
	}, nil
}

func (m *modelFlags) load(g *globalFlags) (*redrafter.Engine, error) {
	e, err := redrafter.Load(m.model, redrafter.Options{Backend: g.backend, Context: m.context, KVCache: m.kvCache})
	if err != nil {
		return nil, err
	}
	if m.drafter != "" {
		if err := e.LoadDrafter(m.drafter); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

func newGenerateCmd(g *globalFlags) *cobra.Command {
	var (
		m          modelFlags
		prompt     string
		promptFile string
		stats      bool
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "generate --model PATH [--prompt TEXT | --prompt-file FILE]",
		Short: "Generate a continuation of a prompt",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if prompt != "" && promptFile != "" {
				return errors.New("give --prompt or --prompt-file, not both")
			}
			if promptFile != "" {
				b, err := os.ReadFile(promptFile)
				if err != nil {
					return err
				}
				prompt = string(b)
			}
			opt, err := m.options()
			if err != nil {
				return err
			}
			e, err := m.load(g)
			if err != nil {
				return err
			}
			defer e.Close()
			out := cmd.OutOrStdout()
			stream := func(s string) error {
				_, err := fmt.Fprint(out, s)
				return err
			}
			if asJSON {
				stream = nil
			}
			res, err := e.Generate(cmd.Context(), prompt, opt, stream)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(out).Encode(jsonResult(res, e))
			}
			fmt.Fprintln(out)
			if stats {
				printStats(cmd.ErrOrStderr(), res, e)
			}
			return nil
		},
	}
	m.register(cmd)
	f := cmd.Flags()
	f.StringVar(&prompt, "prompt", "", "prompt text (default: empty, the model starts from BOS)")
	f.StringVar(&promptFile, "prompt-file", "", "read the prompt from this file")
	f.BoolVar(&stats, "stats", false, "print token counts and speeds to stderr")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with text, tokens and stats to stdout")
	return cmd
}
