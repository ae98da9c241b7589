package redrafter

import (
	"context"

	"github.com/seed9b8f47b1/redrafter/backend/cpu"
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
