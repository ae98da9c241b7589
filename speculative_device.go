package redrafter

import (
	"fmt"
	"time"

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

// deviceStepper runs each ReDrafter step as one run of a
// drafter.DeviceStep: the host waits for the device once per step and
// reads back only the emitted tokens, the next draft's hidden state and
// the checks for NaN. The tokens are those of the host's step (see
// DeviceStep), and the stop rules apply to them in the same order.
type deviceStepper struct {
	s  *Session
	ds *drafter.DeviceStep
}

func (t *deviceStepper) room() int { return t.ds.N }

func (t *deviceStepper) close() { t.ds.Close() }

func (t *deviceStepper) step(h []float32, init int32, st *DraftStats) (stepResult, error) {
	s := t.s
	t0 := time.Now()
	at := s.state.Len()
	emitted, err := t.ds.Run(h, init)
	if err != nil {
		return stepResult{}, fmt.Errorf("redrafter: step after position %d: %w", at, err)
	}
	// The state kept init and the accepted drafts; the last emitted
	// token is the verifier's next, the next step's init.
	n := len(emitted) - 1
	s.commit(init, emitted[:n])
	st.Verify += time.Since(t0) // drafting, verification and acceptance are one device run
	return stepResult{accepted: emitted[:n], next: emitted[n], packed: t.ds.N, w: t.ds.W, l: t.ds.L}, nil
}
