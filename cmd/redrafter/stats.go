package main

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/seed9b8f47b1/redrafter"
)

type statsJSON struct {
	Backend         string  `json:"backend"`
	PromptTokens    int     `json:"prompt_tokens"`
	GeneratedTokens int     `json:"generated_tokens"`
	LoadMS          float64 `json:"load_ms"`
	PrefillMS       float64 `json:"prefill_ms"`
	DecodeMS        float64 `json:"decode_ms"`
	PrefillTokPerS  float64 `json:"prefill_tokens_per_s"`
	DecodeTokPerS   float64 `json:"decode_tokens_per_s"`
	StopReason      string  `json:"stop_reason"`
	// Seed is the sampling seed, given or drawn: --seed with it repeats
	// a sampled run.
	Seed uint64 `json:"seed"`
	// ReDrafter, when a draft head was used.
	Draft *draftJSON `json:"redrafter,omitempty"`
}

type draftJSON struct {
	BeamWidth       int     `json:"beam_width"`
	BeamLength      int     `json:"beam_length"`
	Steps           int     `json:"steps"`
	TokensPerStep   float64 `json:"tokens_per_step"`
	AcceptHist      []int   `json:"accepted_drafts_histogram"`
	AcceptedAtDepth []int   `json:"accepted_at_depth"`
	Compression     float64 `json:"compression"`
	DraftMS         float64 `json:"draft_ms"`
	TreeMS          float64 `json:"tree_ms"`
	VerifyMS        float64 `json:"verify_ms"`
	AcceptMS        float64 `json:"accept_ms"`
	OtherMS         float64 `json:"other_ms"`
	// Device work per step where the backend counts it (metal).
	WaitsPerStep          float64 `json:"waits_per_step,omitempty"`
	CommandBuffersPerStep float64 `json:"command_buffers_per_step,omitempty"`
	DispatchesPerStep     float64 `json:"dispatches_per_step,omitempty"`
}

type resultJSON struct {
	Text   string    `json:"text"`
	Tokens []int32   `json:"tokens"`
	Stats  statsJSON `json:"stats"`
}

func jsonResult(r *redrafter.Result, e *redrafter.Engine) resultJSON {
	s := r.Stats
	tokens := r.Tokens
	if tokens == nil {
		tokens = []int32{}
	}
	return resultJSON{Text: r.Text, Tokens: tokens, Stats: statsJSON{
		Backend:         e.Backend(),
		PromptTokens:    s.PromptTokens,
		GeneratedTokens: s.GeneratedTokens,
		LoadMS:          ms(e.LoadTime.Seconds()),
		PrefillMS:       ms(s.Prefill.Seconds()),
		DecodeMS:        ms(s.Decode.Seconds()),
		PrefillTokPerS:  s.PrefillRate(),
		DecodeTokPerS:   s.DecodeRate(),
		StopReason:      string(r.Reason),
		Draft:           draftStats(r),
	}}
}

func draftStats(r *redrafter.Result) *draftJSON {
	d := r.Stats.Draft
	if d == nil {
		return nil
	}
	waits, dispatches, cbs := d.PerStep()
	return &draftJSON{
		WaitsPerStep: waits, DispatchesPerStep: dispatches, CommandBuffersPerStep: cbs,
		BeamWidth: r.Stats.BeamWidth, BeamLength: r.Stats.BeamLength,
		Steps: d.Steps, TokensPerStep: d.TokensPerStep(), AcceptHist: d.AcceptHist, AcceptedAtDepth: d.AcceptedAtDepth,
		Compression: d.Compression(), DraftMS: ms(d.Draft.Seconds()), TreeMS: ms(d.Tree.Seconds()),
		VerifyMS: ms(d.Verify.Seconds()), AcceptMS: ms(d.Accept.Seconds()), OtherMS: ms(d.Other.Seconds()),
	}
}

func ms(sec float64) float64 { return sec * 1000 }

func printStats(w io.Writer, r *redrafter.Result, e *redrafter.Engine) {
	s := r.Stats
	fmt.Fprintf(w, "backend %s, load %.0f ms\n", e.Backend(), ms(e.LoadTime.Seconds()))
	fmt.Fprintf(w, "prefill: %d tokens in %.1f ms (%.1f tokens/s)\n", s.PromptTokens, ms(s.Prefill.Seconds()), s.PrefillRate())
	fmt.Fprintf(w, "decode:  %d tokens in %.1f ms (%.1f tokens/s), stop: %s\n", s.GeneratedTokens, ms(s.Decode.Seconds()), s.DecodeRate(), r.Reason)
	if d := s.Draft; d != nil {
		fmt.Fprintf(w, "redrafter W=%d L=%d:\n%s", s.BeamWidth, s.BeamLength, d)
	}
}

// printSeed says which seed a sampled run used, so that it can be repeated.
func printSeed(w io.Writer, opt redrafter.GenerateOptions) {
	if !opt.Sampling.Greedy() {
		fmt.Fprintf(w, "seed %d (--seed %d repeats this run)\n", opt.Seed, opt.Seed)
	}
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1
}
