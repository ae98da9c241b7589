// Package testenv holds what the module's tests share about how they run:
// whether the emulated matrices run whole or a representative subset, and
// the seed of a test's random inputs, logged so that a failure replays.
// Only tests import it.
package testenv

import (
	"strconv"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// Full reports whether the tests' emulated matrices (beam shapes × dtypes ×
// KV caches, each a whole generation through emulated GPU kernels) run
// whole: REDRAFTER_TEST_FULL set, as `make test-all` sets it. Otherwise a
// test runs the representative subset it names, so that `make test` stays
// within its time on a 2-core machine.
func Full() bool { return envvar.TestFull.Get() != "" }

// Subset returns all when the full matrices run, else the elements of all
// at the indexes picked (in that order): the representative subset of a
// matrix. An index out of range panics, as a test's own mistake.
func Subset[T any](all []T, picked ...int) []T {
	if Full() {
		return all
	}
	out := make([]T, 0, len(picked))
	for _, i := range picked {
		out = append(out, all[i])
	}
	return out
}

// Seed returns the seed of tb's random inputs: REDRAFTER_SEED when set (to
// replay a failure), else a new one from the clock. It logs the seed, so a
// failing run says how to replay it; a value that is not a decimal uint64
// fails tb.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	s := uint64(time.Now().UnixNano())
	if v := envvar.Seed.Get(); v != "" {
		var err error
		if s, err = strconv.ParseUint(v, 10, 64); err != nil {
			tb.Fatalf("%s=%q: want a decimal unsigned integer", envvar.Seed.Name(), v)
		}
	}
	tb.Logf("%s=%d", envvar.Seed.Name(), s)
	return s
}
