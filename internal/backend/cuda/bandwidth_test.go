package cuda_test

import (
	"context"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudatest"
)

// TestReadBandwidth runs bench's bandwidth probe on the emulated device:
// it launches, waits and reports a rate; and a cancelled context stops it.
func TestReadBandwidth(t *testing.T) {
	drv := cudafake.New(cudatest.NewEmulator(t, nil).Exec)
	be := cuda.NewWithDriver(drv)
	defer be.Close()
	before := drv.Allocations()
	bw, err := cuda.ReadBandwidthOver(be, context.Background(), 1<<16, 1)
	if err != nil || bw <= 0 {
		t.Fatalf("read bandwidth %v, %v", bw, err)
	}
	t.Logf("emulated: %.3g bytes/s", bw)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cuda.ReadBandwidthOver(be, ctx, 1<<16, 1); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
	if s := be.Stats(); s.Launches != 0 {
		t.Errorf("the probe shows in the plans' counters: %+v", s)
	}
	if n := drv.Allocations(); n != before {
		t.Errorf("%d device allocations after the probe, %d before", n, before)
	}
}
