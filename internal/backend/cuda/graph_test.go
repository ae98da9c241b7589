package cuda

import (
	"fmt"
	"testing"
)

// TestHazardDeps: a launch depends on the most recent earlier launch that
// writes what it reads (RAW), reads what it writes (WAR) or writes what
// it writes (WAW), on overlapping bytes; not on launches touching other
// bytes, and not on one already ordered before it through another
// dependency. A step's own launches are chained.
func TestHazardDeps(t *testing.T) {
	sp := func(lo, hi int) []span { return []span{{devptr(lo), devptr(hi)}} }
	acc := []access{
		0: {writes: sp(0, 16)},                         // a = ...
		1: {reads: sp(0, 16), writes: sp(16, 32)},      // b = f(a): RAW on 0
		2: {reads: sp(100, 116), writes: sp(200, 216)}, // independent of 0, 1
		3: {reads: sp(8, 24), writes: sp(300, 316)},    // reads a and b: 1 (and 0 through it)
		4: {reads: sp(300, 316), writes: sp(0, 4)},     // writes a: WAR after 1 and 3, WAW after 0 (through 1)
		5: {writes: sp(32, 48)},                        // touches nothing earlier (adjacent to b)
		6: {reads: sp(200, 216), writes: sp(200, 216)}, // in place over step 2's result
	}
	step := []int{0, 1, 2, 3, 3, 4, 5, 6}
	want := [][]int{{}, {0}, {}, {1}, {3}, {4}, {}, {2}}
	got := hazardDeps(step, acc)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deps\n got %v\nwant %v", got, want)
	}
}
