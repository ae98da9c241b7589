package redrafter

import (
	"context"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
)

// HostReadBandwidth measures this machine's streaming read bandwidth from
// threads threads, in bytes per second: the best of a few passes of the CPU
// backend's vector loads over a 1 GiB buffer (larger than any last-level
// cache), which it allocates for the call. It is the ceiling of decoding on
// the CPU: ModelInfo.DecodeBytes divided by it is the shortest a token can
// take. Memory bandwidth varies with the machine's state, so measure it in
// the same run as any rate it is compared with. It takes about a second.
func HostReadBandwidth(ctx context.Context, threads int) (float64, error) {
	return cpu.ReadBandwidth(ctx, threads, cpu.BandwidthBuffer)
}

// DeviceReadBandwidth returns the probe of the engine's GPU streaming read
// bandwidth (bytes per second, measured by a read kernel on the device: the
// CUDA backend), for the same comparison HostReadBandwidth gives on the
// CPU; nil when the backend has none (the CPU, Metal).
func (e *Engine) DeviceReadBandwidth() func(context.Context) (float64, error) {
	if p, ok := e.be.(interface {
		ReadBandwidth(context.Context) (float64, error)
	}); ok {
		return p.ReadBandwidth
	}
	return nil
}
