package drafter

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// MaxBeamWidth is the widest beam search allowed. The head keeps only its
// top-50 logits, so with more than 50 beams the first step would have to
// expand masked tokens and the reference returns duplicate beams.
const MaxBeamWidth = 50

// topLogits is how many logits per row the head keeps (the reference's
// warp_logits top_k); the rest are set to maskedLogit.
const (
	topLogits   = 50
	maskedLogit = -50000
	deadBeam    = -50000 // initial score of beams 1..W-1
)

// Drafter is a draft head bound to a backend next to its LLM, whose input
// embedding it shares.
//
// BeamSearch is safe for concurrent use (the Sessions of one Engine draft
// at once): the head's weights are shared, and each search runs on a
// searcher of its own, with its own compiled step plans and host scratch,
// taken from those idle and given back when it returns. So there are as many
// searchers as searches ever ran at once. Close must not run concurrently
// with a search.
type Drafter struct {
	Head *Head
	llm  *llama.Runner
	bind *llama.Binding
	// onDevice runs each search as one plan on the backend (see
	// searchOnDevice): set for backends that count their waits for a
	// device (graph.Counter: Metal, CUDA), where every host round trip costs a
	// wait. The CPU keeps the host loop, which is faster there.
	onDevice bool

	mu   sync.Mutex
	idle []*searcher // searchers not in use
	all  []*searcher // every searcher made, for Close
}

// searcher is what one beam search runs on: the head's step compiled for
// each row count, with its own plan buffers, and host scratch.
type searcher struct {
	steps    map[int]*stepGraph      // by rows
	searches map[[2]int]*searchGraph // by (w, l), for onDevice
	// host scratch
	logits, state []float32
	heap          []float32 // warpLogSoftmax's top-50
}

// acquire takes an idle searcher, or makes one.
func (d *Drafter) acquire() *searcher {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.idle); n > 0 {
		s := d.idle[n-1]
		d.idle = d.idle[:n-1]
		return s
	}
	s := &searcher{steps: map[int]*stepGraph{}, searches: map[[2]int]*searchGraph{}}
	d.all = append(d.all, s)
	return s
}

// release gives a searcher back for the next search.
func (d *Drafter) release(s *searcher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idle = append(d.idle, s)
}

// NewDrafter binds h to llm's backend after checking that it was made for
// this LLM.
func NewDrafter(h *Head, llm *llama.Runner) (*Drafter, error) {
	if err := h.Check(llm.Model.Config); err != nil {
		return nil, err
	}
	d := &Drafter{Head: h, llm: llm, bind: llama.NewBinding(llm.Backend)}
	_, d.onDevice = llm.Backend.(graph.Counter)
	if err := d.bind.Add(h.weights()...); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// OnDevice reports whether d's backend counts its waits for a device
// (graph.Counter: Metal, CUDA), where searches run as one plan and a greedy
// decoder runs whole steps as one (DeviceStep).
func (d *Drafter) OnDevice() bool { return d.onDevice }

// Close frees the plans and the weights' backend views.
func (d *Drafter) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sr := range d.all {
		for _, s := range sr.steps {
			s.plan.Free()
		}
		for _, s := range sr.searches {
			s.plan.Free()
		}
		sr.steps, sr.searches = nil, nil
	}
	d.all, d.idle = nil, nil
	d.bind.Close()
}

// stepGraph is one compiled step of the head over rows beams.
type stepGraph struct {
	plan                       *graph.Plan
	tok, state, context, zeros *graph.Array
	newState, logits           *graph.Array
}

// build writes one step of the head as a graph.
func (d *Drafter) build(rows int) (*stepGraph, error) {
	c := d.Head.Config
	g := graph.New()
	s := &stepGraph{
		tok:     g.Input("tokens", graph.I32, rows),
		state:   g.Input("state", graph.F32, rows, c.HiddenSize),
		context: g.Input("context", graph.F32, 1, c.HiddenSize),
		zeros:   g.Input("zeros", graph.I32, rows),
	}
	s.newState, s.logits = d.headStep(g, s.tok, s.state, s.context, s.zeros)
	p, err := graph.Compile(d.llm.Backend, s.newState, s.logits)
	if err != nil {
		return nil, err
	}
	s.plan = p
	return s, nil
}

// headStep adds one step of the head over rows beams to g (PyTorch
// equivalents in the comments): their last tokens [rows], states [rows, H],
// the context h [1, H] and rows zeros to repeat it by.
func (d *Drafter) headStep(g *graph.Graph, tok, state, context, zeros *graph.Array) (newState, logits *graph.Array) {
	h, c := d.Head, d.Head.Config
	w := func(x *llama.Weight) *graph.Array { return d.bind.Array(g, x) }
	e := graph.Embed(d.llm.Array(g, &d.llm.Model.Embed), tok) // e = llm.embed_tokens(tok)   [rows, H]
	if c.RNN {
		newState = graph.RNNStep(e, state, w(&h.RnnW), w(&h.RnnU), w(&h.RnnUBias)) // s = silu(rnn_w(e) + rnn_u(s))
	} else {
		newState = graph.Add(state, e) // s = s + e
	}
	ctx := graph.GatherRows(context, zeros) // h repeated over the beams  [rows, H]
	x := graph.Concat(ctx, newState)        // x = cat([h, s], -1)          [rows, 2H]
	if h.InputProj.Present() {
		x = graph.Add(graph.MatMul(x, w(&h.InputProj)), w(&h.InputProjBias)) // x = input_proj(x)  [rows, E]
	}
	for k := range h.Blocks {
		b := &h.Blocks[k]
		x = graph.Add(x, graph.SiLU(graph.Add(graph.MatMul(x, w(&b.W)), w(&b.B)))) // x = x + silu(lm_head[k](x))
	}
	return newState, graph.MatMul(x, w(&h.Vocab)) // logits = lm_head[n](x)   [rows, V]
}

// step runs the head on sr over rows beams: their last tokens and states,
// with the context h shared. It returns views of the new states [rows, H]
// and the logits [rows, V], valid until sr's next step.
func (d *Drafter) step(sr *searcher, tok []int32, state, context []float32) (newState, logits []float32, err error) {
	rows := len(tok)
	s := sr.steps[rows]
	if s == nil {
		if s, err = d.build(rows); err != nil {
			return nil, nil, err
		}
		sr.steps[rows] = s
	}
	c := d.Head.Config
	zeros := make([]int32, rows)
	p := s.plan
	for _, in := range []struct {
		a *graph.Array
		v any
	}{{s.tok, tok}, {s.state, state}, {s.context, context}, {s.zeros, zeros}} {
		if err := p.Write(in.a, in.v); err != nil {
			return nil, nil, err
		}
	}
	if err := p.Run(); err != nil {
		return nil, nil, fmt.Errorf("drafter: %w", err)
	}
	sr.state = grow(sr.state, rows*c.HiddenSize)
	sr.logits = grow(sr.logits, rows*c.VocabSize)
	if err := p.Read(s.newState, sr.state); err != nil {
		return nil, nil, err
	}
	if err := p.Read(s.logits, sr.logits); err != nil {
		return nil, nil, err
	}
	return sr.state, sr.logits, nil
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// Beams is the result of a beam search.
type Beams struct {
	// Tokens[i] is beam i: the init token, then L-1 drafted tokens. Beams are
	// ordered by score, best first.
	Tokens [][]int32
	// LogQ[i][t] is the head's log-distribution (after the top-50 warp) that
	// proposed Tokens[i][t+1], along beam i's own history. Only kept when
	// asked for: the reference acceptance rule needs it, greedy and exact
	// acceptance do not.
	LogQ [][][]float32
}

// BeamSearch drafts w beams of l tokens (the init token and l-1 drafts) from
// the LLM's final-norm hidden state h of the last cached token and the init
// token the LLM chose after it. It follows the reference exactly: scores
// start at [0, -5e4, ...] so that only beam 0 expands on the first step,
// each step takes the global top-w of the w×V joint scores (ties: lowest
// beam, then lowest token), and beams carry their states and histories.
// Searches may run on different goroutines at once (see Drafter).
func (d *Drafter) BeamSearch(h []float32, init int32, w, l int, keepLogQ bool) (*Beams, error) {
	c := d.Head.Config
	if w < 1 || w > MaxBeamWidth {
		return nil, fmt.Errorf("drafter: beam width %d outside [1, %d]", w, MaxBeamWidth)
	}
	if l < 2 {
		return nil, fmt.Errorf("drafter: beam length %d: a beam needs the init token and at least one draft", l)
	}
	if len(h) != c.HiddenSize {
		panic(fmt.Sprintf("drafter: BeamSearch: context of %d for hidden size %d", len(h), c.HiddenSize))
	}
	v := c.VocabSize
	sr := d.acquire()
	defer d.release(sr)
	if d.onDevice && !keepLogQ {
		return d.searchOnDevice(sr, h, init, w, l)
	}
	beams := &Beams{Tokens: make([][]int32, w)}
	for i := range beams.Tokens {
		beams.Tokens[i] = append(make([]int32, 0, l), init)
	}
	if keepLogQ {
		beams.LogQ = make([][][]float32, w)
	}
	score := make([]float64, w)
	for i := 1; i < w; i++ {
		score[i] = deadBeam
	}
	// All beams start identical (same context, zero state, same token), so
	// the first step runs one row and every beam reads row 0.
	rowOf := make([]int, w)
	state := make([]float32, c.HiddenSize)
	tok := []int32{init}
	lp := make([]float32, w*v)
	nextTok := make([]int32, w)
	nextScore := make([]float64, w)
	src := make([]int, w)
	for t := 1; t < l; t++ {
		newState, logits, err := d.step(sr, tok, state, h)
		if err != nil {
			return nil, err
		}
		if err := checkFinite(logits, v, t); err != nil {
			return nil, err
		}
		rows := len(tok)
		for r := range rows {
			warpLogSoftmax(lp[r*v:(r+1)*v], logits[r*v:(r+1)*v], &sr.heap)
		}
		// Global top-w over the joint scores score[i] + lp[rowOf[i]][tok].
		n := topJoint(score, rowOf, lp, v, w, src, nextTok, nextScore)
		if n < w {
			return nil, fmt.Errorf("drafter: beam search found only %d candidates for %d beams", n, w)
		}
		next := make([][]int32, w)
		nextState := make([]float32, w*c.HiddenSize)
		var nextQ [][][]float32
		if keepLogQ {
			nextQ = make([][][]float32, w)
		}
		for i := range w {
			s := src[i]
			next[i] = append(append(make([]int32, 0, l), beams.Tokens[s]...), nextTok[i])
			copy(nextState[i*c.HiddenSize:(i+1)*c.HiddenSize], newState[rowOf[s]*c.HiddenSize:])
			if keepLogQ {
				q := append([]float32(nil), lp[rowOf[s]*v:(rowOf[s]+1)*v]...)
				nextQ[i] = append(append([][]float32(nil), beams.LogQ[s]...), q)
			}
		}
		beams.Tokens, beams.LogQ = next, nextQ
		copy(score, nextScore)
		state, tok = nextState, slices.Clone(nextTok)
		for i := range rowOf {
			rowOf[i] = i
		}
	}
	return beams, nil
}

// searchGraph is a whole beam search of w beams of l tokens as one graph:
// l-1 steps of the head, each followed by the top-50 warp and log-softmax
// (graph.WarpLogSoftmax) and the global top-w (graph.BeamTop), whose
// choices pick the next step's tokens and states on the device.
type searchGraph struct {
	plan                              *graph.Plan
	init, context, state, start, zero *graph.Array
	sel                               []*graph.Array // [3, w] per draft: row, token, score bits
	// host side
	zeros, startVals []int32
	stateVals        []float32
	selVals          [][]int32
}

// buildSearch compiles the search of w beams of l tokens.
func (d *Drafter) buildSearch(w, l int) (*searchGraph, error) {
	c := d.Head.Config
	g := graph.New()
	sg := &searchGraph{
		init:    g.Input("init", graph.I32, 1),
		context: g.Input("context", graph.F32, 1, c.HiddenSize),
		state:   g.Input("state", graph.F32, 1, c.HiddenSize),
		start:   g.Input("beams", graph.I32, 3, w),
		zero:    g.Input("zeros", graph.I32, w),
	}
	sg.sel = d.addSearch(g, sg.init, sg.context, sg.state, sg.start, sg.zero, w, l)
	p, err := graph.Compile(d.llm.Backend, sg.sel...)
	if err != nil {
		return nil, err
	}
	sg.plan = p
	sg.zeros = make([]int32, w)
	sg.stateVals = make([]float32, c.HiddenSize)
	sg.startVals = startBeams(w)
	for range sg.sel {
		sg.selVals = append(sg.selVals, make([]int32, 3*w))
	}
	return sg, nil
}

// addSearch adds a search of w beams of l tokens to g: from the init token
// [1], the context h [1, H], a zero state [1, H], the starting beams [3, w]
// (scores 0 for beam 0 and deadBeam for the rest) and w zeros. It returns
// each draft's selection [3, w] (graph.BeamTop's layout).
func (d *Drafter) addSearch(g *graph.Graph, init, context, state, start, zero *graph.Array, w, l int) []*graph.Array {
	// As on the host, the first step runs one row (every beam starts from
	// the same token and state) and only beam 0 is alive.
	var sel []*graph.Array
	tok, beams, zeros := init, start, graph.Slice(zero, 0, 1)
	for t := 1; t < l; t++ {
		newState, logits := d.headStep(g, tok, state, context, zeros)
		beams = graph.BeamTop(beams, graph.WarpLogSoftmax(logits, topLogits, maskedLogit), w)
		sel = append(sel, beams)
		if t+1 < l {
			tok = graph.Reshape(graph.Slice(beams, 1, 2), w)
			state = graph.GatherRows(newState, graph.Reshape(graph.Slice(beams, 0, 1), w))
			zeros = zero
		}
	}
	return sel
}

// startBeams is the search's starting selection [3, w]: only beam 0 alive.
func startBeams(w int) []int32 {
	start := make([]int32, 3*w)
	for i := 1; i < w; i++ {
		start[2*w+i] = int32(math.Float32bits(deadBeam))
	}
	return start
}

// nonFiniteDraft is the error for a search whose scores are NaN: a
// non-finite logit makes every score of its draft NaN (see
// graph.BeamTopOp), and every later one.
func nonFiniteDraft(sel []int32, w, draft int) error {
	for _, bits := range sel[2*w:] {
		if x := math.Float32frombits(uint32(bits)); x-x != 0 {
			return fmt.Errorf("drafter: the draft head produced NaN or Inf logits for draft %d; its weights may hold NaN or Inf", draft)
		}
	}
	return nil
}

// searchOnDevice is BeamSearch as one plan run: the host writes the
// context and the init token, waits for the device once, reads back each
// draft's choices (3·w integers) and follows them back from the last draft
// to spell the beams. Scores are float32 sums here (float64 on the host),
// so a near-tie may rank differently from the host search; either is a
// valid beam search, and verification makes the output the same.
func (d *Drafter) searchOnDevice(sr *searcher, h []float32, init int32, w, l int) (*Beams, error) {
	key := [2]int{w, l}
	sg := sr.searches[key]
	if sg == nil {
		var err error
		if sg, err = d.buildSearch(w, l); err != nil {
			return nil, err
		}
		sr.searches[key] = sg
	}
	p := sg.plan
	for _, in := range []struct {
		a *graph.Array
		v any
	}{{sg.init, []int32{init}}, {sg.context, h}, {sg.state, sg.stateVals}, {sg.start, sg.startVals}, {sg.zero, sg.zeros}} {
		if err := p.Write(in.a, in.v); err != nil {
			return nil, err
		}
	}
	if err := p.Run(); err != nil {
		return nil, fmt.Errorf("drafter: %w", err)
	}
	for t, a := range sg.sel {
		if err := p.Read(a, sg.selVals[t]); err != nil {
			return nil, err
		}
		if err := nonFiniteDraft(sg.selVals[t], w, t+1); err != nil {
			return nil, err
		}
	}
	beams := &Beams{Tokens: make([][]int32, w)}
	for i := range beams.Tokens {
		tok := make([]int32, l)
		tok[0] = init
		b := i
		for t := l - 1; t >= 1; t-- {
			sel := sg.selVals[t-1]
			tok[t] = sel[w+b]
			b = int(sel[b]) // the row, which is the beam from the second draft on
		}
		beams.Tokens[i] = tok
	}
	return beams, nil
}

// warpLogSoftmax is the reference's compute_logits: subtract the maximum,
// set every logit below the 50th largest to -50000, then log-softmax (in
// float64, stored as float32). It gives the same bits as that definition
// (refWarpLogSoftmax in the tests) in one pass over the vocabulary plus 50
// exponentials instead of V: the 50th largest of x-mx is the 50th largest x
// minus mx, since rounding is monotonic, and a masked logit adds
// exp(-50000), which is 0 in float64, to the sum.
func warpLogSoftmax(dst, logits []float32, heap *[]float32) {
	mx := float32(math.Inf(-1))
	for _, x := range logits {
		if x > mx { // not max(): its NaN and signed-zero rules cost 3x here
			mx = x
		}
	}
	kth := float32(math.Inf(-1))
	if len(logits) > topLogits {
		kth = kthLargest(logits, topLogits, heap) - mx
	}
	var sum float64
	for i, x := range logits {
		y := x - mx
		if y < kth {
			dst[i] = maskedLogit
			continue
		}
		dst[i] = y
		sum += math.Exp(float64(y))
	}
	lse := float32(math.Log(sum))
	for i := range dst {
		dst[i] -= lse
	}
}

// kthLargest returns the k-th largest of x (k from 1, counting repeats),
// keeping the k largest seen so far in a min-heap: O(len(x)·log k), and
// for most inputs one comparison per element.
func kthLargest(x []float32, k int, heap *[]float32) float32 {
	h := append((*heap)[:0], x[:k]...)
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for _, v := range x[k:] {
		if v > h[0] {
			h[0] = v
			siftDown(h, 0)
		}
	}
	*heap = h
	return h[0]
}

// siftDown restores the min-heap property of h below node i.
func siftDown(h []float32, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if !(h[c] < h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// topJoint selects the w best (beam, token) pairs by score[beam] +
// lp[rowOf[beam]][token], best first, ties to the lower flat index
// beam·V+token. It returns how many it found.
func topJoint(score []float64, rowOf []int, lp []float32, v, w int, src []int, tok []int32, best []float64) int {
	n := 0
	for b := range score {
		row := lp[rowOf[b]*v : (rowOf[b]+1)*v]
		for t, q := range row {
			s := score[b] + float64(q)
			if n == w && !(s > best[w-1]) {
				continue
			}
			j := min(n, w-1)
			for j > 0 && s > best[j-1] {
				best[j], src[j], tok[j] = best[j-1], src[j-1], tok[j-1]
				j--
			}
			best[j], src[j], tok[j] = s, b, int32(t)
			if n < w {
				n++
			}
		}
	}
	return n
}
