package bench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/apihooks"
)

// Pass is the cost of one forward pass over N new tokens after a cached
// context, returning every token's logits as verification does.
type Pass struct {
	N      int     `json:"tokens"`
	Cached int     `json:"after_cached"` // tokens in the cache before the pass
	MS     float64 `json:"ms"`           // median
	// Relative is MS over the median of a one-token pass: what verifying N
	// tokens costs in autoregressive steps.
	Relative float64 `json:"relative_to_one"`
}

// MeasurePasses times forward passes over each of ns new tokens (a causal
// chain, the costliest tree of that size) after prefix cached tokens: reps
// rounds, each running every size once, so that load changes hit all sizes
// alike. It reports the median of each size.
func MeasurePasses(e *redrafter.Engine, ns []int, prefix, reps int) ([]Pass, error) {
	if len(ns) == 0 || reps <= 0 || prefix < 1 {
		return nil, fmt.Errorf("bench: passes need sizes, repetitions and a prefix of at least one token")
	}
	maxN := slices.Max(ns)
	if slices.Min(ns) < 1 || prefix+maxN > e.Context() {
		return nil, fmt.Errorf("bench: passes of 1..%d tokens after %d do not fit the context of %d", maxN, prefix, e.Context())
	}
	p, err := apihooks.NewProbe(e)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	c := e.Model()
	tokens := make([]int32, max(prefix, maxN))
	for i := range tokens {
		tokens[i] = int32(3 + i%(c.Vocab-3)) // any tokens: the cost does not depend on them
	}
	logits := make([]float32, maxN*c.Vocab)
	hidden := make([]float32, maxN*c.Dim)
	if err := p.Forward(tokens[:prefix], nil, nil); err != nil {
		return nil, err
	}
	if err := p.Keep(prefix); err != nil {
		return nil, err
	}
	pass := func(n int) (time.Duration, error) {
		t0 := time.Now()
		err := p.Forward(tokens[:n], logits[:n*c.Vocab], hidden[:n*c.Dim])
		return time.Since(t0), err
	}
	times := make([][]time.Duration, len(ns))
	for rep := -1; rep < reps; rep++ { // round -1 compiles the plans
		for i, n := range ns {
			d, err := pass(n)
			if err != nil {
				return nil, err
			}
			if rep >= 0 {
				times[i] = append(times[i], d)
			}
		}
	}
	one := 0.0
	out := make([]Pass, len(ns))
	for i, n := range ns {
		slices.Sort(times[i])
		out[i] = Pass{N: n, Cached: prefix, MS: ms(times[i][len(times[i])/2])}
		if n == 1 {
			one = out[i].MS
		}
	}
	if one == 0 {
		d := make([]time.Duration, 0, reps)
		for range reps {
			t, err := pass(1)
			if err != nil {
				return nil, err
			}
			d = append(d, t)
		}
		slices.Sort(d)
		one = ms(d[len(d)/2])
	}
	for i := range out {
		out[i].Relative = out[i].MS / one
	}
	return out, nil
}

// WritePasses prints the pass costs as a table.
func WritePasses(w io.Writer, ps []Pass) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tokens\tafter cached\tms\ttokens/s\t×1 token\t")
	for _, p := range ps {
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.1f\t%.2f\t\n", p.N, p.Cached, p.MS, 1000*float64(p.N)/p.MS, p.Relative)
	}
	return tw.Flush()
}
