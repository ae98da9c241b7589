package emu

import (
	"fmt"
	"strconv"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// Order is an order of running threads: which ready thread of a
// threadgroup the scheduler resumes first at each step, and the order of
// the threadgroups. A thread runs until it waits at a barrier or in a
// simdgroup (warp) collective, so the order decides which writes a thread
// that should have waited, and did not, sees.
type Order struct {
	kind uint32
	seed uint64
}

var (
	// Forward runs threads by increasing index, threadgroups by increasing
	// position (x fastest).
	Forward = Order{kind: 0}
	// Reverse runs threads and threadgroups by decreasing index.
	Reverse = Order{kind: 1}
)

// Random runs threads in a new random order at every scheduling pass, and
// threadgroups in a random order, from seed.
func Random(seed uint64) Order { return Order{kind: 2, seed: seed} }

func (o Order) String() string {
	switch o.kind {
	case 0:
		return "forward"
	case 1:
		return "reverse"
	}
	return fmt.Sprintf("random(%d)", o.seed)
}

// DefaultOrders is forward, reverse and one random order: with forward
// alone, a missing barrier before a thread reads what a lower thread wrote
// goes unseen; reverse sees it, and forward sees the mirror image; the
// random order mixes both within a threadgroup. The random order's seed is
// fixed (0x5eed) so that a failure replays; REDRAFTER_SEED, when set,
// replaces it, to try other random orders or replay one a message named.
func DefaultOrders() ([]Order, error) {
	seed, err := SeedOr(0x5eed)
	if err != nil {
		return nil, err
	}
	return []Order{Forward, Reverse, Random(seed)}, nil
}

// SeedOr is REDRAFTER_SEED when it is set, else def: the seed of a random
// choice a harness makes (a thread order, a graph's node order), which the
// variable replays.
func SeedOr(def uint64) (uint64, error) {
	v := envvar.Seed.Get()
	if v == "" {
		return def, nil
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("emu: %s=%q: want a decimal unsigned integer", envvar.Seed.Name(), v)
	}
	return seed, nil
}
