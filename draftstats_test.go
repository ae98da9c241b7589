package redrafter

import (
	"slices"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// record adds a step over tr, as the ReDrafter loop does.
func record(s *DraftStats, tr *drafter.Tree, n, emitted int) {
	s.record(tr.N(), tr.Width(), tr.Length(), n, emitted)
}

func TestDraftStats(t *testing.T) {
	var s DraftStats
	if s.TokensPerStep() != 0 || s.Compression() != 0 {
		t.Errorf("empty Stats: %g tokens/step, %g compression", s.TokensPerStep(), s.Compression())
	}
	tr, _ := drafter.BuildTree([][]int32{{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 6, 7}}) // W=3 L=4 N=7
	record(&s, tr, 3, 4)
	record(&s, tr, 0, 1)
	record(&s, tr, 1, 2)
	record(&s, tr, 3, 2) // cut short by a stop rule
	if s.Steps != 4 || s.Tokens != 9 || s.Packed != 28 || s.Beamed != 48 {
		t.Errorf("Stats = %+v", s)
	}
	if got, want := s.AcceptHist, []int{1, 1, 0, 2}; !slices.Equal(got, want) {
		t.Errorf("AcceptHist = %v, want %v", got, want)
	}
	if got, want := s.AcceptedAtDepth, []int{4, 3, 2, 2}; !slices.Equal(got, want) {
		t.Errorf("AcceptedAtDepth = %v, want %v", got, want)
	}
	if got := s.TokensPerStep(); got != 2.25 {
		t.Errorf("TokensPerStep = %g, want 2.25", got)
	}
	if got := s.Compression(); got != 48.0/28 {
		t.Errorf("Compression = %g, want %g", got, 48.0/28)
	}
}

func TestDraftStatsString(t *testing.T) {
	var s DraftStats
	tr, _ := drafter.BuildTree([][]int32{{1, 2, 3}, {1, 2, 4}, {1, 5, 6}})
	record(&s, tr, 2, 3)
	record(&s, tr, 1, 2)
	record(&s, tr, 0, 1)
	s.Draft, s.Tree, s.Verify, s.Accept = 3*time.Millisecond, 50*time.Microsecond, 6*time.Millisecond, 950*time.Microsecond
	want := `steps          3
tokens         6 (2.00 per step)
compression    1.50x (18 packed of 27 beam tokens)
drafts accepted  steps  reached
  0                  1   100.0%
  1                  1    66.7%
  2                  1    33.3%
time
  draft               3ms  30.0%
  tree               50µs   0.5%
  verify              6ms  60.0%
  accept            950µs   9.5%
  other                0s   0.0%
`
	if got := s.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}
