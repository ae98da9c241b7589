package redrafter

import (
	"context"
	"fmt"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// deviceStep reports whether p runs as drafter.DeviceStep: greedy decoding
// with the real draft head on a backend that counts its waits for a device
// (Metal, CUDA), where the whole step as one plan saves the host round trips.
// The CPU keeps the host loop, which merges shared prefixes (fewer rows to
// verify) and waits for nothing; sampling keeps it because its acceptance
// rules read whole distributions; a test's steered beamSource has no
// device. forceDeviceStep (tests) takes the device path on any backend.
func (d *decoder) deviceStep(p *specPlan) (*drafter.Drafter, bool) {
	dr, ok := p.d.(*drafter.Drafter)
	// A member of a Group verifies through the group's joint passes (the
	// host loop's s.run), not a plan of its own.
	if !ok || !d.opt.Sampling.Greedy() || d.s.group != nil {
		return nil, false
	}
	return dr, dr.OnDevice() || forceDeviceStep
}

// forceDeviceStep is set by tests to run the device step on the CPU.
var forceDeviceStep bool

// speculativeOnDevice is the greedy ReDrafter loop with each step one run of
// a drafter.DeviceStep: the host waits for the device once per step and
// reads back only the emitted tokens, the next draft's hidden state and
// the checks for NaN. The tokens are those of speculative (see
// DeviceStep), and the stop rules apply to them in the same order.
func (d *decoder) speculativeOnDevice(ctx context.Context, p *specPlan, dr *drafter.Drafter) error {
	s := d.s
	st := &drafter.Stats{}
	d.em.res.Stats.Draft = st
	d.em.res.Stats.BeamWidth, d.em.res.Stats.BeamLength = p.w, p.l
	counter, _ := s.e.be.(graph.Counter) // device work per step, where the backend counts it

	init, err := d.pick(s.logits) // the first token comes from the prefill
	if err != nil {
		return err
	}
	h := append([]float32(nil), s.hidden...)
	if done, err := d.em.push(init); done || err != nil {
		return err
	}
	step, err := dr.NewDeviceStep(s.state, p.w, p.l)
	if err != nil {
		return err
	}
	defer step.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.state.Len()+step.N > s.state.Cap() {
			return d.finishNearEnd(ctx, init)
		}
		var before graph.Counts
		if counter != nil {
			before = counter.Counts()
		}
		t0 := time.Now()
		at := s.state.Len()
		emitted, err := step.Run(h, init)
		if err != nil {
			return fmt.Errorf("redrafter: step after position %d: %w", at, err)
		}
		// The state kept init and the accepted drafts; the last emitted
		// token is the verifier's next, the next step's init.
		n := len(emitted) - 1
		s.tokens = append(append(s.tokens, init), emitted[:n]...)
		t1 := time.Now()
		st.Verify += t1.Sub(t0) // drafting, verification and acceptance are one device run
		if counter != nil {
			d := counter.Counts().Sub(before)
			st.Device.Waits += d.Waits
			st.Device.Dispatches += d.Dispatches
			st.Device.CommandBuffers += d.CommandBuffers
		}

		pushed := 0
		done := false
		for _, tok := range emitted {
			pushed++
			if done, err = d.em.push(tok); done || err != nil {
				break
			}
		}
		st.RecordChains(p.w, p.l, n, pushed)
		st.Other += time.Since(t1)
		if done || err != nil {
			return err
		}
		init = emitted[n]
	}
}
