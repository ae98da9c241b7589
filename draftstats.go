package redrafter

import (
	"fmt"
	"strings"
	"time"
)

// DraftStats is the ledger of a ReDrafter generation: acceptance, tree
// compression and where the time went.
type DraftStats struct {
	Steps  int // decoding steps (verification passes)
	Tokens int // tokens emitted

	// AcceptHist[n] counts the steps that accepted n drafts (0..L-1).
	AcceptHist []int
	// AcceptedAtDepth[d] counts the steps whose accepted path reached depth
	// d: [0] is every step (the init token), [d]/[d-1] is the acceptance rate
	// at depth d given depth d-1.
	AcceptedAtDepth []int

	Packed int // Σ N, the tokens verified
	Beamed int // Σ W·L, the tokens the beams hold before merging prefixes
	// Offered is Σ (L-1), the draft positions the steps offered (the beam
	// length may change from step to step: a Group shortens it under load).
	Offered int

	// Device is the device work of the steps, on a backend that counts it
	// (Metal, CUDA; zero on the CPU), summed over Steps. It counts the whole
	// backend, so Sessions decoding on other goroutines at the same time
	// add theirs.
	Device DeviceCounts

	Draft  time.Duration // drafter beam search
	Tree   time.Duration // sorting, merging, packing
	Verify time.Duration // the LLM forward over the packed tokens
	Accept time.Duration // acceptance and KV compaction
	Other  time.Duration
}

// DeviceCounts are device work: the host's waits for the device, the
// kernels dispatched and the command buffers (CUDA: graph launches) sent.
type DeviceCounts struct{ Waits, Dispatches, CommandBuffers int }

// record adds one step that verified packed tokens of w beams of length l,
// accepted n drafts and emitted emitted tokens (n+1, or fewer when a stop
// rule cut the step short).
func (s *DraftStats) record(packed, w, l, n, emitted int) {
	s.Steps++
	s.Tokens += emitted
	s.Packed += packed
	s.Beamed += w * l
	s.Offered += max(l-1, 0)
	for len(s.AcceptHist) < max(n+1, l) {
		s.AcceptHist = append(s.AcceptHist, 0)
		s.AcceptedAtDepth = append(s.AcceptedAtDepth, 0)
	}
	s.AcceptHist[n]++
	for d := 0; d <= n; d++ {
		s.AcceptedAtDepth[d]++
	}
}

// TokensPerStep is the mean number of tokens emitted per verification pass.
func (s *DraftStats) TokensPerStep() float64 {
	if s.Steps == 0 {
		return 0
	}
	return float64(s.Tokens) / float64(s.Steps)
}

// Compression is the paper's compression ratio: beam tokens per packed token
// (≥ 1; 1 means no shared prefixes).
func (s *DraftStats) Compression() float64 {
	if s.Packed == 0 {
		return 0
	}
	return float64(s.Beamed) / float64(s.Packed)
}

// PerStep is the device work of a mean step (zero when nothing was counted).
func (s *DraftStats) PerStep() (waits, dispatches, commandBuffers float64) {
	if s.Steps == 0 {
		return 0, 0, 0
	}
	n := float64(s.Steps)
	return float64(s.Device.Waits) / n, float64(s.Device.Dispatches) / n, float64(s.Device.CommandBuffers) / n
}

// Total is the sum of the timed phases.
func (s *DraftStats) Total() time.Duration {
	return s.Draft + s.Tree + s.Verify + s.Accept + s.Other
}

// String formats the ledger as a small table.
func (s *DraftStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "steps          %d\n", s.Steps)
	fmt.Fprintf(&b, "tokens         %d (%.2f per step)\n", s.Tokens, s.TokensPerStep())
	fmt.Fprintf(&b, "compression    %.2fx (%d packed of %d beam tokens)\n", s.Compression(), s.Packed, s.Beamed)
	if len(s.AcceptHist) > 0 {
		b.WriteString("drafts accepted  steps  reached\n")
		for n, c := range s.AcceptHist {
			fmt.Fprintf(&b, "  %-14d %5d %7.1f%%\n", n, c, pct(s.AcceptedAtDepth[n], s.Steps))
		}
	}
	if s.Device != (DeviceCounts{}) {
		w, d, c := s.PerStep()
		fmt.Fprintf(&b, "device         %.2f host waits, %.2f command buffers, %.1f dispatches per step\n", w, c, d)
	}
	if total := s.Total(); total > 0 {
		b.WriteString("time\n")
		for _, r := range []struct {
			name string
			d    time.Duration
		}{{"draft", s.Draft}, {"tree", s.Tree}, {"verify", s.Verify}, {"accept", s.Accept}, {"other", s.Other}} {
			fmt.Fprintf(&b, "  %-12s %10v %5.1f%%\n", r.name, r.d.Round(time.Microsecond), 100*float64(r.d)/float64(total))
		}
	}
	return b.String()
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
