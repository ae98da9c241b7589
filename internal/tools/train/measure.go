package train

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seed9b8f47b1/redrafter"
)

// Measurer runs greedy ReDrafter decoding over a set of prompts with the
// engine's draft head and measures tokens per step, checking every output
// against autoregressive greedy decoding of the same prompt.
type Measurer struct {
	e         *redrafter.Engine
	prompts   []string
	maxTokens int
	ref       [][]int32 // autoregressive outputs, computed on first use
	arTime    time.Duration
}

// NewMeasurer prepares measurements over prompts, maxTokens new tokens each.
func NewMeasurer(e *redrafter.Engine, prompts []string, maxTokens int) *Measurer {
	return &Measurer{e: e, prompts: prompts, maxTokens: maxTokens}
}

// Measurement is greedy ReDrafter decoding at one beam shape over all
// prompts.
type Measurement struct {
	W, L          int
	Prompts       int
	Tokens, Steps int     // tokens emitted by the draft loop, and its steps
	TokensPerStep float64 // Tokens / Steps
	Mismatches    int     // prompts whose output differs from autoregressive decoding
	Decode        time.Duration
	ARDecode      time.Duration // autoregressive decoding of the same prompts
}

func (m Measurement) String() string {
	return fmt.Sprintf("W=%d L=%d: %.3f tokens/step (%d tokens in %d steps over %d prompts), decode %.0f ms vs %.0f ms autoregressive, %d outputs differ",
		m.W, m.L, m.TokensPerStep, m.Tokens, m.Steps, m.Prompts, ms(m.Decode), ms(m.ARDecode), m.Mismatches)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Measure decodes every prompt greedily with beams of w×l.
func (m *Measurer) Measure(ctx context.Context, w, l int) (Measurement, error) {
	if _, ok := m.e.DraftHead(); !ok {
		return Measurement{}, errors.New("train: the engine has no draft head to measure")
	}
	if m.ref == nil {
		for _, p := range m.prompts {
			res, err := m.e.Generate(ctx, p, redrafter.GenerateOptions{MaxTokens: m.maxTokens, Draft: redrafter.DraftOptions{Off: true}}, nil)
			if err != nil {
				return Measurement{}, err
			}
			m.ref = append(m.ref, res.Tokens)
			m.arTime += res.Stats.Decode
		}
	}
	out := Measurement{W: w, L: l, Prompts: len(m.prompts), ARDecode: m.arTime}
	for i, p := range m.prompts {
		res, err := m.e.Generate(ctx, p, redrafter.GenerateOptions{MaxTokens: m.maxTokens,
			Draft: redrafter.DraftOptions{BeamWidth: w, BeamLength: l}}, nil)
		if err != nil {
			return out, err
		}
		if d := res.Stats.Draft; d != nil {
			out.Tokens += d.Tokens
			out.Steps += d.Steps
		}
		out.Decode += res.Stats.Decode
		if !slices.Equal(res.Tokens, m.ref[i]) {
			out.Mismatches++
		}
	}
	if out.Steps > 0 {
		out.TokensPerStep = float64(out.Tokens) / float64(out.Steps)
	}
	return out, nil
}
