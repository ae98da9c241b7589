package cpu

import (
	"context"
	"errors"
	"math"
	"testing"
)

func TestReadBandwidth(t *testing.T) {
	for _, threads := range []int{1, 3} {
		bw, err := ReadBandwidth(context.Background(), threads, 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		// Any machine this runs on reads between 100 MB/s and 10 TB/s; a
		// figure outside is a timing or size mistake, not a slow machine.
		if math.IsNaN(bw) || bw < 1e8 || bw > 1e13 {
			t.Errorf("threads %d: %g bytes/s", threads, bw)
		}
	}
	if _, err := ReadBandwidth(context.Background(), 0, 8<<20); err == nil {
		t.Error("0 threads: no error")
	}
	if _, err := ReadBandwidth(context.Background(), 4, 64); err == nil {
		t.Error("64-byte buffer for 4 threads: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadBandwidth(ctx, 1, 8<<20); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
