package metal

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// Policy is how a plan is cut into command buffers: data, chosen per device
// class (MLX's measured defaults) and overridable from the environment with
// REDRAFTER_METAL_FIRST_COMMIT, REDRAFTER_METAL_OPS_PER_BUFFER,
// REDRAFTER_METAL_MB_PER_BUFFER and REDRAFTER_METAL_MATVEC_MAX_ROWS, one
// per field (see WithEnv and package envvar).
type Policy struct {
	FirstCommit  int // dispatches in the first command buffer, committed early
	OpsPerBuffer int // dispatches per later command buffer
	// MBPerBuffer, when not 0, also commits a command buffer once the
	// distinct byte ranges it binds reach this many MiB. Off by default:
	// a replayed plan needs no memory bound on its command buffers.
	MBPerBuffer int
	// MatvecMaxRows is the largest M that MatMul runs as matvec; larger M
	// use the simdgroup-matrix kernel. The two order their sums differently,
	// so greedy ReDrafter reproduces greedy decoding bit for bit only while
	// verification trees, like decode steps, go through matvec: the default
	// covers the largest recommended beam's tree (W=3, L=5: 13 tokens).
	MatvecMaxRows int
}

// DefaultPolicy returns the policy for a device: MLX's measured dispatch
// counts by device class (see deviceClass), 20 dispatches per buffer on
// phones, 40 on base chips and 50 on Pro, Max and Ultra, and no byte limit
// (see planSchedule).
func DefaultPolicy(info DeviceInfo) Policy {
	p := Policy{FirstCommit: 10, OpsPerBuffer: 40, MatvecMaxRows: 16}
	switch deviceClass(info) {
	case classPhone:
		p.OpsPerBuffer = 20
	case classPro, classMax, classUltra:
		p.OpsPerBuffer = 50
	}
	return p
}

// WithEnv applies the environment overrides: each variable that is set
// replaces its field, and a value that is not a non-negative integer is an
// error. FirstCommit and OpsPerBuffer are at least 1.
func (p Policy) WithEnv() (Policy, error) {
	for _, o := range []struct {
		env envvar.Count
		v   *int
	}{
		{envvar.MetalFirstCommit, &p.FirstCommit},
		{envvar.MetalOpsPerBuffer, &p.OpsPerBuffer},
		{envvar.MetalMBPerBuffer, &p.MBPerBuffer},
		{envvar.MetalMatvecMaxRows, &p.MatvecMaxRows},
	} {
		n, set, err := o.env.Get()
		if err != nil {
			return p, fmt.Errorf("metal: %w", err)
		}
		if set {
			*o.v = n
		}
	}
	if p.FirstCommit < 1 {
		p.FirstCommit = 1
	}
	if p.OpsPerBuffer < 1 {
		p.OpsPerBuffer = 1
	}
	return p, nil
}

// BeamShape is the ReDrafter beam for a device: W beams of length L.
type BeamShape struct{ Width, Length int }

// RecommendedBeam is the default beam for a device class: base M-series
// chips (and phones) W=1, Pro and Max W=2, Ultra W=3; L=4, or 5 on Ultra.
// More compute per step pays only where the GPU has cores to spare. The
// class comes from the GPU's core count when the system reports it (base
// chips have 7-10 cores, Pro 14-20, Max 24-40, Ultra 48-80), else from the
// architecture and marketing names.
func RecommendedBeam(info DeviceInfo) BeamShape {
	class := deviceClass(info)
	ultra := class == classUltra
	pro := class == classPro || class == classMax
	if info.Cores > 0 {
		ultra, pro = info.Cores >= 48, info.Cores >= 14
	}
	switch {
	case ultra:
		return BeamShape{3, 5}
	case pro:
		return BeamShape{2, 4}
	default:
		return BeamShape{1, 4}
	}
}

// RecommendedBeam is the backend's default ReDrafter beam (W, L) for its
// device; the runtime finds it through an optional interface.
func (b *Backend) RecommendedBeam() (width, length int) {
	s := RecommendedBeam(b.Device())
	return s.Width, s.Length
}

// InvariantRows is how many rows one forward pass may hold while each row's
// result stays independent of the others (llama.InvariantRower, which joint
// passes of several sequences respect): MatMul runs every row through
// matvec, whose rows do not depend on the batch, up to
// Policy.MatvecMaxRows rows; above it the simdgroup-matrix kernel orders
// its sums differently.
func (b *Backend) InvariantRows() int { return max(1, b.policy.MatvecMaxRows) }
