package redrafter

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// DraftOptions control ReDrafter speculative decoding.
type DraftOptions struct {
	// Off decodes autoregressively even when the engine has a draft head.
	Off bool
	// BeamWidth W and BeamLength L (the init token plus L-1 drafts); 0 picks
	// the backend's default (Engine.DefaultBeam).
	BeamWidth, BeamLength int
	// Accept is the acceptance rule when sampling ("": AcceptExact).
	// Greedy decoding always accepts the longest path equal to the model's
	// argmax.
	Accept AcceptanceRule
}

// AcceptanceRule decides which drafted tokens a sampled ReDrafter step keeps.
type AcceptanceRule string

// Acceptance rules.
const (
	// AcceptExact preserves the sampling distribution exactly.
	AcceptExact AcceptanceRule = "exact"
	// AcceptApple reproduces the reference implementation's rule, which
	// does not.
	AcceptApple AcceptanceRule = "apple"
)

// DefaultBeam is the beam shape used when DraftOptions leave it unset. A
// backend that knows its device recommends one (Metal: W=1 on base M-series
// chips, 2 on Pro/Max, 3 on Ultra, as the paper found); otherwise the CPU
// default, chosen from measurements in docs/BENCHMARKS.md.
func (e *Engine) DefaultBeam() (width, length int) {
	if r, ok := e.be.(interface{ RecommendedBeam() (int, int) }); ok {
		return r.RecommendedBeam()
	}
	return cpuBeamWidth, cpuBeamLength
}

// The CPU's default beam: the fastest shape measured on the TinyLlama-shaped
// (inflated) stories260K in f16, 2.66× autoregressive decoding; wider beams
// draft more tokens per step but a CPU pays nearly linearly for verifying
// them (docs/BENCHMARKS.md, "Quantized weights").
const cpuBeamWidth, cpuBeamLength = 1, 5

// LoadDrafter loads a ReDrafter draft head (a directory with config.json and
// model.safetensors) and binds it next to the model. A head made for
// another model (vocabulary or hidden size) is refused.
func (e *Engine) LoadDrafter(dir string) error {
	if e.runner == nil {
		return ErrClosed
	}
	h, err := drafter.Load(dir)
	if err != nil {
		return err
	}
	d, err := drafter.NewDrafter(h, e.runner)
	if err != nil {
		h.Close()
		return err
	}
	if e.drafter != nil {
		e.drafter.Close()
		e.drafter.Head.Close()
	}
	e.drafter, e.draftSource = d, d
	return nil
}

// DraftHeadInfo describes a loaded draft head.
type DraftHeadInfo struct {
	Vocab      int  // vocabulary size (the model's)
	HiddenSize int  // the model's hidden size the head reads
	ExitDim    int  // width of the head's residual blocks ([h; s])
	Layers     int  // residual blocks
	RNN        bool // the recurrent state s is used
}

// DraftHead describes the loaded draft head; false when none is loaded.
func (e *Engine) DraftHead() (DraftHeadInfo, bool) {
	if e.drafter == nil {
		return DraftHeadInfo{}, false
	}
	c := e.drafter.Head.Config
	return DraftHeadInfo{Vocab: c.VocabSize, HiddenSize: c.HiddenSize, ExitDim: c.ExitDim, Layers: c.NumDraftLayers, RNN: c.RNN}, true
}

// beamSource drafts beams; *drafter.Drafter is the real one, tests plug in
// others to steer acceptance.
type beamSource interface {
	BeamSearch(h []float32, init int32, w, l int, keepLogQ bool) (*drafter.Beams, error)
}

// specPlan is a validated speculative configuration.
type specPlan struct {
	d      beamSource
	w, l   int
	accept AcceptanceRule
}

// CheckDraft reports the error every generation with o would fail with (a
// beam width out of range, a tree that cannot fit the context, an unknown
// acceptance rule), so that a server can refuse such options at startup;
// nil when o is valid or the engine has no draft head.
func (e *Engine) CheckDraft(o DraftOptions) error {
	_, err := e.draftPlan(o)
	return err
}

// draftPlan validates o against the engine; nil means autoregressive.
func (e *Engine) draftPlan(o DraftOptions) (*specPlan, error) {
	if e.draftSource == nil || o.Off {
		return nil, nil
	}
	w, l := e.DefaultBeam()
	if o.BeamWidth != 0 {
		w = o.BeamWidth
	}
	if o.BeamLength != 0 {
		l = o.BeamLength
	}
	switch {
	case w < 1 || w > drafter.MaxBeamWidth:
		return nil, fmt.Errorf("redrafter: beam width %d outside [1, %d] (the draft head keeps its top %d tokens)", w, drafter.MaxBeamWidth, drafter.MaxBeamWidth)
	case l < 2:
		return nil, fmt.Errorf("redrafter: beam length %d: a beam needs the init token and at least one draft (L >= 2)", l)
	case 1+w*(l-1) >= e.context:
		return nil, fmt.Errorf("redrafter: beams of %d×%d need up to %d tokens, more than the context of %d", w, l, 1+w*(l-1), e.context)
	}
	accept := o.Accept
	switch accept {
	case "":
		accept = AcceptExact
	case AcceptExact, AcceptApple:
	default:
		return nil, fmt.Errorf("redrafter: unknown acceptance rule %q (exact or apple)", accept)
	}
	return &specPlan{d: e.draftSource, w: w, l: l, accept: accept}, nil
}
