package drafter

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/sample"
	"github.com/seed9b8f47b1/redrafter/internal/sample/sampletest"
)

// The reference's greedy fixture (recurrent_drafting_test.py). Its LLM
// argmaxes are per beam and inconsistent across shared prefixes (they could
// not come from one packed forward pass), so only the oracle can take them.
func TestRefGreedyFixture(t *testing.T) {
	beams := [][]int32{{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 3, 4, 5}}
	byLLM := [][][]int32{
		{{2, 3, 4, 5}, {2, 3, 4, 6}, {3, 4, 6, 8}},
		{{1, 3, 4, 6}, {2, 5, 4, 5}, {7, 4, 6, 8}},
		{{8, 3, 4, 6}, {8, 5, 4, 5}, {8, 4, 6, 8}},
	}
	wantN, wantSeq := []int{3, 1, 0}, []int{0, 1, 0}
	for row := range byLLM {
		n, best := refGreedy(beams, byLLM[row])
		if n[best] != wantN[row] || best != wantSeq[row] {
			t.Errorf("row %d: refGreedy = n %v best %d, want n* %d i* %d", row, n, best, wantN[row], wantSeq[row])
		}
	}
}

func TestAcceptGreedyHand(t *testing.T) {
	// Sorted: [1 2 3 4] [1 2 3 5] [1 3 4 5]; packed 1 2 3 4 5 3 4 5.
	tr, _ := BuildTree([][]int32{{1, 3, 4, 5}, {1, 2, 3, 5}, {1, 2, 3, 4}})
	for _, c := range []struct {
		argmax  []int32 // per packed node
		beam, n int
	}{
		{[]int32{2, 3, 5, 9, 9, 9, 9, 9}, 1, 3}, // 2, 3, then 5: beam [1 2 3 5]
		{[]int32{2, 3, 4, 9, 9, 9, 9, 9}, 0, 3},
		{[]int32{2, 7, 4, 9, 9, 9, 9, 9}, 0, 1},
		{[]int32{3, 3, 4, 9, 9, 4, 6, 9}, 2, 2},
		{[]int32{6, 3, 4, 9, 9, 4, 6, 9}, 0, 0},
	} {
		beam, n := AcceptGreedy(tr, c.argmax)
		if beam != c.beam || n != c.n {
			t.Errorf("AcceptGreedy(argmax %v) = %d, %d; want %d, %d", c.argmax, beam, n, c.beam, c.n)
		}
	}
}

// randomArgmax gives per-node LLM argmaxes that often follow a child.
func randomArgmax(rng *rand.Rand, tr *Tree, v int) []int32 {
	am := make([]int32, tr.N())
	for u := range am {
		am[u] = int32(rng.IntN(v))
		var kids []int32
		for c := tr.firstChild(u); c >= 0; c = tr.nextSibling(u, c) {
			kids = append(kids, tr.Tokens[c])
		}
		if len(kids) > 0 && rng.IntN(4) != 0 {
			am[u] = kids[rng.IntN(len(kids))]
		}
	}
	return am
}

// AcceptGreedy on the packed tree equals the reference rule on the beams.
func TestAcceptGreedyMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for trial := range 3000 {
		w, l, v := 1+rng.IntN(16), 1+rng.IntN(6), 2+rng.IntN(4)
		beams := randomBeams(rng, w, l, v)
		tr, _ := BuildTree(beams)
		am := randomArgmax(rng, tr, v)
		sorted := make([]int, w)
		for i, o := range tr.Order {
			sorted[o] = i
		}
		byLLM := make([][]int32, w)
		for o := range beams {
			byLLM[o] = make([]int32, l)
			for d := range l {
				byLLM[o][d] = am[tr.Unpacker[sorted[o]][d]]
			}
		}
		n, best := refGreedy(beams, byLLM)
		beam, got := AcceptGreedy(tr, am)
		path := tr.Path(beam, got)
		if got != n[best] ||
			!slices.Equal(tr.Beams[beam][:got+1], beams[best][:got+1]) ||
			!slices.Equal(path, tr.Unpacker[sorted[best]][:got+1]) ||
			am[path[got]] != byLLM[best][got] {
			t.Fatalf("trial %d: beams %v argmax %v: AcceptGreedy = beam %d n %d; reference n %v i* %d",
				trial, beams, am, beam, got, n, best)
		}
	}
}

// With one-hot targets (greedy sampling parameters) exact sampling is
// greedy decoding.
func TestAcceptSampleGreedyLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for trial := range 1000 {
		w, l, v := 1+rng.IntN(16), 1+rng.IntN(6), 2+rng.IntN(4)
		tr, _ := BuildTree(randomBeams(rng, w, l, v))
		am := randomArgmax(rng, tr, v)
		buf := make([]float64, v)
		probs := func(u int) []float64 {
			logits := make([]float32, v)
			logits[am[u]] = 1
			sample.Probs(buf, logits, sample.Params{})
			return buf
		}
		path, next := AcceptSample(tr, probs, rng, nil)
		beam, n := AcceptGreedy(tr, am)
		if want := tr.Path(beam, n); !slices.Equal(path, want) || next != am[want[n]] {
			t.Fatalf("trial %d: AcceptSample = %v, %d; greedy %v, %d", trial, path, next, want, am[want[n]])
		}
	}
}

// --- A toy LLM and drafter for the distribution tests. ---

// toyLM is a fixed random conditional distribution over v tokens given the
// last two tokens: the "LLM" target, already filtered by sampling params.
type toyLM struct {
	v    int
	rows [][]float64 // [v·v][v]
}

func newToyLM(rng *rand.Rand, v int, spread float64, p sample.Params) *toyLM {
	m := &toyLM{v: v, rows: make([][]float64, v*v)}
	logits := make([]float32, v)
	for i := range m.rows {
		for j := range logits {
			logits[j] = float32(rng.NormFloat64() * spread)
		}
		m.rows[i] = make([]float64, v)
		sample.Probs(m.rows[i], logits, p)
	}
	return m
}

func (m *toyLM) next(a, b int32) []float64 { return m.rows[int(a)*m.v+int(b)] }

// toyDrafter is a distribution over the next token given the last one.
type toyDrafter struct {
	rows  [][]float64
	cache map[[3]int]drafted // beam search results by (init token, W, L)
}

type drafted struct {
	beams [][]int32
	q     [][][]float64
}

// draft is beamSearch, memoised: the drafts depend only on the init token.
func (dr *toyDrafter) draft(g int32, w, l int) ([][]int32, [][][]float64) {
	key := [3]int{int(g), w, l}
	d, ok := dr.cache[key]
	if !ok {
		if dr.cache == nil {
			dr.cache = map[[3]int]drafted{}
		}
		d.beams, d.q = dr.beamSearch(g, w, l)
		dr.cache[key] = d
	}
	return d.beams, d.q
}

// randomDrafter is unrelated to the LLM.
func randomDrafter(rng *rand.Rand, v int) *toyDrafter {
	d := &toyDrafter{rows: make([][]float64, v)}
	logits := make([]float32, v)
	for i := range d.rows {
		for j := range logits {
			logits[j] = float32(rng.NormFloat64() * 2)
		}
		d.rows[i] = make([]float64, v)
		sample.Probs(d.rows[i], logits, sample.Params{Temperature: 1})
	}
	return d
}

// goodDrafter is the LLM marginalised over the older token: as good as a
// one-token-context drafter gets.
func goodDrafter(m *toyLM) *toyDrafter {
	d := &toyDrafter{rows: make([][]float64, m.v)}
	for b := range m.v {
		d.rows[b] = make([]float64, m.v)
		for a := range m.v {
			for x, p := range m.next(int32(a), int32(b)) {
				d.rows[b][x] += (p + 1e-3) / (float64(m.v) * (1 + float64(m.v)*1e-3))
			}
		}
	}
	return d
}

// beamSearch is the reference beam search over the toy drafter: w beams of
// l tokens from init token g; q[i][d] is the distribution that proposed
// beams[i][d] (d >= 1). Requires w <= v.
func (dr *toyDrafter) beamSearch(g int32, w, l int) (beams [][]int32, q [][][]float64) {
	type cand struct {
		score float64
		beam  int
		tok   int32
	}
	beams, q = [][]int32{{g}}, [][][]float64{{nil}}
	scores := []float64{0}
	var cands []cand
	for range l - 1 {
		cands = cands[:0]
		for j, b := range beams {
			for x, p := range dr.rows[b[len(b)-1]] {
				cands = append(cands, cand{scores[j] + math.Log(p), j, int32(x)})
			}
		}
		slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(b.score, a.score) })
		nb, nq, ns := make([][]int32, 0, w), make([][][]float64, 0, w), make([]float64, 0, w)
		for _, c := range cands[:min(w, len(cands))] {
			old := beams[c.beam]
			nb = append(nb, append(slices.Clone(old), c.tok))
			nq = append(nq, append(slices.Clone(q[c.beam]), dr.rows[old[len(old)-1]]))
			ns = append(ns, c.score)
		}
		beams, q, scores = nb, nq, ns
	}
	for len(beams) < w { // l == 1: w copies of the init token
		beams, q = append(beams, beams[0]), append(q, q[0])
	}
	return beams, q
}

type acceptRule int

const (
	ruleSample acceptRule = iota
	ruleApple
)

// decode runs the speculative decode loop from history (a, g), g being the
// init token, until k tokens after g are emitted, and returns them.
func decode(rng *rand.Rand, m *toyLM, dr *toyDrafter, rule acceptRule, a, g int32, w, l, k int, tb *TreeBuilder, scratch []float64) []int32 {
	var out []int32
	for len(out) < k {
		beams, q := dr.draft(g, w, l)
		tr, err := tb.Build(beams)
		if err != nil {
			panic(err)
		}
		probs := func(u int) []float64 {
			switch tr.Depth[u] {
			case 0:
				return m.next(a, g)
			case 1:
				return m.next(g, tr.Tokens[u])
			}
			return m.next(tr.Tokens[tr.Parent[u]], tr.Tokens[u])
		}
		var path []int32
		var next int32
		switch rule {
		case ruleSample:
			path, next = AcceptSample(tr, probs, rng, scratch)
		case ruleApple:
			drafts := func(beam, depth int) []float64 { return q[beam][depth] }
			path, next = AcceptApple(tr, probs, drafts, rng, scratch)
		}
		seq := []int32{a, g}
		for _, u := range path[1:] {
			seq = append(seq, tr.Tokens[u])
		}
		seq = append(seq, next)
		out = append(out, seq[2:]...)
		a, g = seq[len(seq)-2], seq[len(seq)-1]
	}
	return out[:k]
}

type distCase struct {
	name   string
	v      int
	target sample.Params
	good   bool // drafter close to the LLM
	w, l   int
}

// jointFit samples the first three tokens after (a, g) n times and returns
// the chi-square fit to the LLM's own joint distribution.
func jointFit(c distCase, rule acceptRule, n int) (stat float64, df int, p float64) {
	rng := rand.New(rand.NewPCG(uint64(c.v*100+c.w*10+c.l), 42))
	m := newToyLM(rng, c.v, 2, c.target)
	dr := randomDrafter(rng, c.v)
	if c.good {
		dr = goodDrafter(m)
	}
	const a, g = 1, 2
	v := c.v
	want := make([]float64, v*v*v)
	for y1, p1 := range m.next(a, g) {
		for y2, p2 := range m.next(g, int32(y1)) {
			for y3, p3 := range m.next(int32(y1), int32(y2)) {
				want[(y1*v+y2)*v+y3] = p1 * p2 * p3
			}
		}
	}
	counts := make([]int, len(want))
	var tb TreeBuilder
	scratch := make([]float64, v)
	for range n {
		y := decode(rng, m, dr, rule, a, g, c.w, c.l, 3, &tb, scratch)
		counts[(int(y[0])*v+int(y[1]))*v+int(y[2])]++
	}
	return sampletest.ChiSquare(counts, want, 5)
}

const (
	fitSamples = 100000
	fitAlpha   = 1e-4
)

// AcceptSample emits exactly the LLM's distribution: the joint law of the
// first three tokens (one or more steps) fits the product of the LLM's
// conditionals.
func TestAcceptSampleExact(t *testing.T) {
	for _, c := range []distCase{
		{"chain W=1 L=2, random drafter", 8, sample.Params{Temperature: 1}, false, 1, 2},
		{"W=3 L=3, good drafter", 8, sample.Params{Temperature: 1}, true, 3, 3},
		{"W=4 L=4, good drafter, T=0.7 top-k 5 top-p 0.9", 8, sample.Params{Temperature: 0.7, TopK: 5, TopP: 0.9}, true, 4, 4},
		{"W=8 L=3, random drafter, top-k 3", 8, sample.Params{Temperature: 1.3, TopK: 3}, false, 8, 3},
		{"W=1 L=1, no drafts", 8, sample.Params{Temperature: 1}, false, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := fitSamples
			if testing.Short() {
				n /= 5
			}
			stat, df, p := jointFit(c, ruleSample, n)
			t.Logf("chi2 = %.1f, df = %d, p = %.3g", stat, df, p)
			if p < fitAlpha {
				t.Errorf("AcceptSample does not reproduce the LLM's distribution: chi2 = %.1f, df = %d, p = %.3g", stat, df, p)
			}
		})
	}
}

// The same test rejects the reference's rule: with deterministic drafts the
// Leviathan ratio over-accepts the drafter's favourites.
func TestAcceptAppleBiased(t *testing.T) {
	c := distCase{"W=3 L=3, good drafter", 8, sample.Params{Temperature: 1}, true, 3, 3}
	n := fitSamples
	if testing.Short() {
		n /= 5
	}
	stat, df, p := jointFit(c, ruleApple, n)
	t.Logf("chi2 = %.1f, df = %d, p = %.3g", stat, df, p)
	if p >= fitAlpha {
		t.Errorf("AcceptApple passed the fit (chi2 = %.1f, df = %d, p = %.3g); the test no longer detects its bias", stat, df, p)
	}
}

// scripted is a rand source that yields given uniforms through Float64.
type scripted struct{ u []float64 }

func (s *scripted) Uint64() uint64 {
	if len(s.u) == 0 {
		panic("scripted: out of numbers")
	}
	u := s.u[0]
	s.u = s.u[1:]
	return uint64(u * (1 << 53))
}

// A hand-worked AcceptApple step: per-beam coins (a shared draft gets one per
// beam), the first longest beam in the caller's order, the bonus or the
// relu(p-q) residual.
func TestAcceptAppleHand(t *testing.T) {
	// Caller's beams o0 o1 o2; sorted [0 1 2] [0 1 3] [0 4 5], and the packed
	// index of each node equals its token.
	beams := [][]int32{{0, 1, 3}, {0, 4, 5}, {0, 1, 2}}
	tr, _ := BuildTree(beams)
	if !slices.Equal(tr.Tokens, []int32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("tokens %v", tr.Tokens)
	}
	const v = 6
	onehot := func(x int) []float64 { p := make([]float64, v); p[x] = 1; return p }
	probs := func(u int) []float64 {
		switch u {
		case 0:
			return []float64{0, 0.4, 0, 0, 0.1, 0.5}
		case 1: // after [0 1]
			return []float64{0.1, 0, 0.3, 0.2, 0, 0.4}
		case 4: // after [0 4]
			return []float64{0, 0, 0, 0.5, 0, 0.5}
		}
		return onehot(u) // leaves
	}
	qRoot := []float64{0, 0.8, 0, 0, 0.2, 0} // ratios: token 1 0.5, token 4 0.5
	q01 := []float64{0, 0, 0.6, 0.4, 0, 0}   // token 2 0.5, token 3 0.5
	q04 := []float64{0, 0, 0, 0, 0, 1}       // token 5 0.5
	drafts := func(beam, depth int) []float64 {
		if depth == 1 {
			return qRoot
		}
		return [][]float64{q01, q04, q01}[beam]
	}
	for _, c := range []struct {
		name  string
		coins []float64 // o0 d1, o0 d2, o1 d1, o1 d2, o2 d1, o2 d2, then the final draw
		path  []int32
		next  int32
	}{
		// o0 accepts both drafts: the bonus comes from its leaf's p.
		{"bonus", []float64{0.3, 0.2, 0.4, 0.9, 0.9, 0.9, 0.5}, []int32{0, 1, 3}, 3},
		// o0 rejects token 1, o2 accepts the same node with its own coin and
		// rejects 2: the residual relu(p(.|0 1) - q01) = [0.1 0 0 0 0 0.4]
		// (the mass of o0's sibling draft 3 stays removed only because q01
		// covers it); draw 0.1·0.5 falls in token 0's 0.1.
		{"shared node, residual", []float64{0.7, 0.0, 0.99, 0.0, 0.2, 0.6, 0.1}, []int32{0, 1}, 0},
		{"residual, other token", []float64{0.7, 0.0, 0.99, 0.0, 0.2, 0.6, 0.3}, []int32{0, 1}, 5},
		// o1 and o2 both accept everything: o1 comes first in the caller's
		// order although o2 sorts first.
		{"tie", []float64{0.6, 0, 0.1, 0.2, 0.1, 0.1, 0.5}, []int32{0, 4, 5}, 5},
		// Nobody accepts: n* = 0 on o0, residual relu(p(.|0) - qRoot) = token 5.
		{"none", []float64{0.6, 0, 0.6, 0, 0.6, 0, 0.99}, []int32{0}, 5},
	} {
		rng := rand.New(&scripted{slices.Clone(c.coins)})
		path, next := AcceptApple(tr, probs, drafts, rng, nil)
		if !slices.Equal(path, c.path) || next != c.next {
			t.Errorf("%s: AcceptApple = path %v next %d, want %v, %d", c.name, path, next, c.path, c.next)
		}
	}
	// A draft with p = q = 0 is rejected (0/0 is not < u), and a zero
	// residual (p == q) falls back to p.
	chain, _ := BuildTree([][]int32{{0, 1}})
	p := onehot(2)
	path, next := AcceptApple(chain, func(int) []float64 { return p },
		func(int, int) []float64 { return p }, rand.New(&scripted{[]float64{0, 0.5}}), nil)
	if !slices.Equal(path, []int32{0}) || next != 2 {
		t.Errorf("zero residual: AcceptApple = %v, %d; want [0], 2", path, next)
	}
}

// refApple is the reference's sampling rule on unsorted beams with per-beam
// probability rows, as in _choose_from_candidates / _prepare_next_input.
func refApple(beams [][]int32, pAt func(beam, depth int) []float64, q func(beam, depth int) []float64, rng *rand.Rand) (beam, n int, next int32) {
	w, l := len(beams), len(beams[0])
	acc := make([][]bool, w)
	for i := range w {
		acc[i] = make([]bool, l-1)
		for d := 1; d < l; d++ {
			x := beams[i][d]
			acc[i][d-1] = rng.Float64() < math.Exp(math.Log(pAt(i, d-1)[x])-math.Log(q(i, d)[x]))
		}
	}
	n = -1
	for i := range w {
		ni := 0
		for ni < l-1 && acc[i][ni] {
			ni++
		}
		if ni > n {
			beam, n = i, ni
		}
	}
	p := pAt(beam, n)
	if n == l-1 {
		return beam, n, sample.Draw(p, rng)
	}
	r := make([]float64, len(p))
	sum := 0.0
	for x := range r {
		r[x] = max(0, p[x]-q(beam, n+1)[x])
		sum += r[x]
	}
	if sum == 0 {
		r = p
	}
	return beam, n, sample.Draw(r, rng)
}

func TestAcceptAppleMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	const v = 5
	m := newToyLM(rng, v, 1, sample.Params{Temperature: 1, TopK: 4})
	dr := randomDrafter(rng, v)
	for trial := range 2000 {
		w, l := 1+rng.IntN(v), 1+rng.IntN(5)
		g := int32(rng.IntN(v))
		beams, q := dr.beamSearch(g, w, l)
		if trial%3 == 0 { // unsorted, with duplicates
			beams = randomBeams(rng, w, l, 3)
			for i := range beams {
				beams[i][0] = g
			}
			q = make([][][]float64, w)
			for i := range q {
				q[i] = make([][]float64, l)
				for d := 1; d < l; d++ {
					q[i][d] = dr.rows[rng.IntN(v)]
				}
			}
		}
		const a = 0
		lm := func(seq []int32) []float64 { // LLM after a, seq
			if len(seq) == 1 {
				return m.next(a, seq[0])
			}
			return m.next(seq[len(seq)-2], seq[len(seq)-1])
		}
		tr, _ := BuildTree(beams)
		seed := rng.Uint64()
		path, next := AcceptApple(tr,
			func(u int) []float64 { return lm(tr.Beams[tr.BeamOf[u]][:tr.Depth[u]+1]) },
			func(beam, depth int) []float64 { return q[beam][depth] },
			rand.New(rand.NewPCG(seed, 0)), nil)
		beam, n, want := refApple(beams,
			func(beam, depth int) []float64 { return lm(beams[beam][:depth+1]) },
			func(beam, depth int) []float64 { return q[beam][depth] },
			rand.New(rand.NewPCG(seed, 0)))
		var got []int32
		for _, u := range path {
			got = append(got, tr.Tokens[u])
		}
		if !slices.Equal(got, beams[beam][:n+1]) || next != want {
			t.Fatalf("trial %d: beams %v: AcceptApple = %v, %d; reference beam %d n %d = %v, %d",
				trial, beams, got, next, beam, n, beams[beam][:n+1], want)
		}
	}
}

// AcceptSample must not write to the caller's distributions.
func TestAcceptSampleLeavesProbsAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 15))
	m := newToyLM(rng, 6, 2, sample.Params{Temperature: 1})
	before := cloneRows(m.rows)
	dr := randomDrafter(rng, 6)
	var tb TreeBuilder
	for range 2000 {
		decode(rng, m, dr, ruleSample, 0, 1, 4, 4, 3, &tb, nil)
	}
	for i := range before {
		if !slices.Equal(before[i], m.rows[i]) {
			t.Fatalf("row %d changed: %v -> %v", i, before[i], m.rows[i])
		}
	}
}

func cloneRows(r [][]float64) [][]float64 {
	c := make([][]float64, len(r))
	for i := range r {
		c[i] = slices.Clone(r[i])
	}
	return c
}

func BenchmarkAcceptSample(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const v = 32000
	p := make([]float64, v)
	logits := make([]float32, v)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	sample.Probs(p, logits, sample.Params{Temperature: 0.8, TopK: 50})
	tr, _ := BuildTree(beamSearchLike(rng, 8, 5))
	scratch := make([]float64, v)
	b.ReportAllocs()
	for b.Loop() {
		AcceptSample(tr, func(int) []float64 { return p }, rng, scratch)
	}
}

// When the children hold all the mass, rounding can make the last one
// rejectable with probability ~1e-16; the residual is then empty and that
// child is taken instead.
func TestAcceptSampleAllMassOnChildren(t *testing.T) {
	tr, _ := BuildTree([][]int32{{0, 1}, {0, 2}})
	probs := func(u int) []float64 {
		if u == 0 {
			// 1 - p[1] rounds above p[2]: a coin just below 1 rejects token 2.
			return []float64{0, 0.5243109063135573, 0.4756890936864427}
		}
		return []float64{0, 0, 0, 1} // bonus: token 3
	}
	for _, coins := range [][]float64{
		{0.99, 1 - 0x1p-53, 0.5},
		{0.99, 0.5, 0.5},
	} {
		path, next := AcceptSample(tr, probs, rand.New(&scripted{slices.Clone(coins)}), nil)
		if !slices.Equal(path, []int32{0, 2}) || next != 3 {
			t.Errorf("coins %v: AcceptSample = %v, %d; want [0 2], 3", coins, path, next)
		}
	}
}
