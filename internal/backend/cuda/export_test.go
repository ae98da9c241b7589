package cuda

import "context"

// ReadBandwidthOver is readBandwidth over size bytes and runs runs, for
// the external tests (ReadBandwidth's gigabyte is too much to emulate).
func ReadBandwidthOver(b *Backend, ctx context.Context, size, runs int) (float64, error) {
	return b.readBandwidth(ctx, size, runs)
}
