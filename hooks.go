package redrafter

import (
	"context"

	"github.com/seed9b8f47b1/redrafter/internal/apihooks"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// The tools' hooks (package apihooks) are filled in here, so that the
// public API holds only what an application needs.
func init() {
	apihooks.NewProbe = func(e any) (apihooks.Probe, error) { return e.(*Engine).newProbe() }
	apihooks.Embeddings = func(e any) ([]float32, []float32, error) { return e.(*Engine).embeddings() }
	apihooks.DecodeBytes = func(e any) int64 { return e.(*Engine).decodeBytes }
	apihooks.HostReadBandwidth = func(ctx context.Context, threads int) (float64, error) {
		return cpu.ReadBandwidth(ctx, threads, cpu.BandwidthBuffer)
	}
	apihooks.DeviceReadBandwidth = func(e any) func(context.Context) (float64, error) {
		if p, ok := e.(*Engine).be.(interface {
			ReadBandwidth(context.Context) (float64, error)
		}); ok {
			return p.ReadBandwidth
		}
		return nil
	}
}

// embeddings is apihooks.Embeddings.
func (e *Engine) embeddings() (embed, output []float32, err error) {
	if e.ckpt == nil {
		return nil, nil, ErrClosed
	}
	m := e.ckpt.Model
	return llama.F32Values(m.Embed), llama.F32Values(m.Output), nil
}
