package redrafter

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// Group runs the forward passes of its Sessions together: while several of
// them generate, each on its own goroutine, the new tokens of all of them
// (a decode token, a prefill chunk, a ReDrafter tree) go through the model
// as the rows of one pass, so the weights are read once per pass instead of
// once per session. This is continuous batching: a session joins when its
// Generate starts and leaves when it returns, between passes.
//
// The generation loop of each session is unchanged; only its forward call
// goes to the group, which runs a joint pass as soon as every generating
// member is waiting on one, and hands each member its rows. Every member's
// logits have the bits its own pass would give (llama.Batcher), so a
// session's tokens do not depend on who shares its passes: greedy text, and
// sampled text for a seed, equal what the session produces alone.
//
// A member that does not come back for its next pass within the straggler
// wait (SetStragglerWait; its stream's reader may be slow) is left out of
// the passes until it does, so one slow or stuck member does not stall the
// others. Cancelling one member's context ends its generation at its next
// step, as alone; its leaving lets the others' next pass run. An error in
// one member's pass (non-finite logits, a full context) is that member's
// alone.
//
// The Sessions of a Group are used as any Session: each on one goroutine at
// a time. NewSession, SetStragglerWait and Stats are safe concurrently;
// Close must not overlap a generation of its members.
type Group struct {
	e       *Engine
	batcher *llama.Batcher
	passMu  sync.Mutex // held while the batcher runs or is changed

	mu      sync.Mutex
	active  []*Session // members in Generate, in the order they joined
	waiting map[*Session]*groupCall
	inPass  map[*Session]bool // members whose requests the running pass holds
	late    map[*Session]bool // members left out of a pass, until their next forward
	running bool
	closed  bool
	wait    time.Duration
	most    int // the most sequences one gathering held
	// idle frees the compiled passes once no member has generated for
	// idleRelease; stopped when one starts again.
	idle        *time.Timer
	idleRelease time.Duration
	rowBudget   int // SetRowBudget
}

// groupCall is one member's forward pass request, done when served.
type groupCall struct {
	req  *llama.Request
	done chan struct{}
}

// DefaultStragglerWait is how long a waiting member waits for the others
// before a pass runs without the ones that have not come back.
const DefaultStragglerWait = 100 * time.Millisecond

// idleRelease is how long a group stays without generating members before
// it frees its compiled passes. A burst of traffic compiles one pass per mix
// of members and row counts (tens of megabytes of activations on a 1B
// model); a server at rest gives that memory back, and the next burst
// compiles them again in a few milliseconds each.
const idleRelease = 2 * time.Second

// NewGroup returns an empty group of sessions that share forward passes.
func (e *Engine) NewGroup() *Group {
	g := &Group{e: e, waiting: map[*Session]*groupCall{}, inPass: map[*Session]bool{}, late: map[*Session]bool{},
		wait: DefaultStragglerWait, idleRelease: idleRelease, rowBudget: groupRows(e)}
	if e.runner != nil {
		g.batcher = e.runner.NewBatcher()
	}
	return g
}

// NewSession returns a session of the group, with a KV cache of
// Engine.Context() tokens.
func (g *Group) NewSession() (*Session, error) {
	g.mu.Lock()
	closed := g.closed || g.batcher == nil
	g.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	s, err := g.e.NewSession()
	if err != nil {
		return nil, err
	}
	s.group = g
	return s, nil
}

// SetStragglerWait sets how long members waiting for a pass wait for the
// others before it runs without them (DefaultStragglerWait unless set);
// 0 waits for every generating member, always.
func (g *Group) SetStragglerWait(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wait = max(d, 0)
}

// groupRows is the default row budget of a group's passes: the rows a
// backend keeps batch-invariant where it has a limit (Metal's matvec rows,
// where a pass is still bound by reading the weights), else cpuGroupRows.
func groupRows(e *Engine) int {
	if ir, ok := e.be.(llama.InvariantRower); ok {
		return ir.InvariantRows()
	}
	return cpuGroupRows
}

// cpuGroupRows: on the CPU, a pass over up to about 16 rows costs little
// more than reading the weights once (TinyLlama-shaped f16, 2 cores: 4 rows
// 1.10× one, 8 rows 1.50×, 16 rows 2.29×); beyond it a pass is bound by
// arithmetic (about 88 rows/s there, whatever the count), so rows spent on
// drafts are rows taken from other sequences' tokens. docs/BENCHMARKS.md,
// "serve under load".
const cpuGroupRows = 16

// SetRowBudget sets the rows that the greedy ReDrafter steps of the group's
// generating members should fill in one pass together: with n members
// drafting W beams of L tokens each, every member's beam is cut until its
// tree (1 + W·(L-1) rows at most) fits rows/n, narrower first and then
// shorter, down to an autoregressive step (L = 1) when even two rows each
// would not. A member alone keeps its
// beam. Greedy outputs do not change (they are those of decoding token by
// token); only the work per pass does. Sampling members keep their beam,
// since their draws depend on it and a seed gives the same text in a group
// as alone. 0 removes the limit.
func (g *Group) SetRowBudget(rows int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rowBudget = max(rows, 0)
}

// beam is the beam shape a member drafting w beams of up to l tokens uses
// for its next step, given the members generating now: narrower first (one
// beam drafts more accepted tokens per verified row than several), then
// shorter.
func (g *Group) beam(w, l int) (int, int) {
	g.mu.Lock()
	n, budget := len(g.active), g.rowBudget
	g.mu.Unlock()
	if n <= 1 || budget == 0 {
		return w, l
	}
	per := budget / n
	for l > 1 && 1+w*(l-1) > per {
		if w > 1 {
			w--
		} else {
			l--
		}
	}
	return w, l
}

// GroupStats count a group's passes.
type GroupStats struct {
	Passes   int // joint forward passes run
	Requests int // members' forward calls they served
	Rows     int // tokens they ran
	Compiles int // plans compiled for them (the rest came from the cache)
	Cached   int // compiled plans held now (freed when the group is idle)
	// MostSequences is the most members' requests gathered for one pass.
	MostSequences int
}

// Stats returns the group's counts so far.
func (g *Group) Stats() GroupStats {
	g.passMu.Lock()
	var b llama.BatcherStats
	if g.batcher != nil {
		b = g.batcher.Stats()
	}
	g.passMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	return GroupStats{Passes: b.Passes, Requests: b.Requests, Rows: b.Rows, Compiles: b.Compiles, Cached: b.Cached, MostSequences: g.most}
}

// Close frees the group's compiled passes. Its sessions stay open (Close
// them too), but their Generate returns ErrClosed from now on.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	if g.idle != nil {
		g.idle.Stop()
	}
	for s, c := range g.waiting {
		c.req.Err = ErrClosed
		close(c.done)
		delete(g.waiting, s)
	}
	g.mu.Unlock()
	g.passMu.Lock()
	defer g.passMu.Unlock()
	if g.batcher != nil {
		g.batcher.Close()
	}
}

// join makes s a generating member.
func (g *Group) join(s *Session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Contains(g.active, s) {
		g.active = append(g.active, s)
	}
	if g.idle != nil {
		g.idle.Stop()
	}
}

// leave ends s's membership; the others' pass may be ready without it.
func (g *Group) leave(s *Session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active = slices.DeleteFunc(g.active, func(m *Session) bool { return m == s })
	delete(g.late, s)
	if len(g.active) == 0 && !g.closed {
		if g.idle == nil {
			g.idle = time.AfterFunc(g.idleRelease, g.release)
		} else {
			g.idle.Reset(g.idleRelease)
		}
	}
	if g.ready() {
		go func() { // s's Generate returns now; a waiting member's pass runs here
			g.mu.Lock()
			defer g.mu.Unlock()
			g.drive()
		}()
	}
}

// release frees the compiled passes if the group is still idle: no member
// generates and no pass runs (one that starts later compiles its own).
func (g *Group) release() {
	g.mu.Lock()
	busy := len(g.active) > 0 || g.running || g.closed
	g.mu.Unlock()
	if busy {
		return
	}
	g.passMu.Lock()
	defer g.passMu.Unlock()
	if g.batcher != nil {
		g.batcher.Release()
	}
}

// forget frees the compiled passes that involve a member's cache.
func (g *Group) forget(st *llama.State) {
	g.passMu.Lock()
	defer g.passMu.Unlock()
	if g.batcher != nil {
		g.batcher.Forget(st)
	}
}

// ready reports whether a pass should start: none is running, someone waits,
// and every generating member that is not late waits. g.mu is held.
func (g *Group) ready() bool {
	if g.running || g.closed || len(g.waiting) == 0 {
		return false
	}
	for _, m := range g.active {
		if g.waiting[m] == nil && !g.late[m] {
			return false
		}
	}
	return true
}

// drive runs passes while the group is ready. g.mu is held on entry and on
// return, released while a pass runs so that members can queue the next.
func (g *Group) drive() {
	for g.ready() {
		g.running = true
		g.mu.Unlock()
		g.passMu.Lock()
		g.mu.Lock()
		// Gather the requests in the members' join order, so that the same
		// members give the same plan key from pass to pass.
		var calls []*groupCall
		for _, m := range g.active {
			if c := g.waiting[m]; c != nil {
				calls = append(calls, c)
				delete(g.waiting, m)
				g.inPass[m] = true
			}
		}
		for m, c := range g.waiting { // a member that left while waiting cannot; kept for safety
			calls = append(calls, c)
			delete(g.waiting, m)
		}
		g.most = max(g.most, len(calls))
		g.mu.Unlock()
		g.runPass(calls)
		g.passMu.Unlock()
		g.mu.Lock()
		clear(g.inPass)
		g.running = false
		for _, c := range calls {
			close(c.done)
		}
	}
}

// runPass runs the batcher over calls; a panic in it becomes every call's
// error rather than taking the process down from a member's goroutine.
func (g *Group) runPass(calls []*groupCall) {
	reqs := make([]*llama.Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	defer func() {
		if p := recover(); p != nil {
			for _, q := range reqs {
				q.Err = fmt.Errorf("redrafter: joint forward pass: %v", p)
			}
		}
	}()
	if g.batcher == nil {
		for _, q := range reqs {
			q.Err = ErrClosed
		}
		return
	}
	g.batcher.Forward(reqs)
}

// forward runs s's batch in the group's next pass and waits for it.
func (g *Group) forward(s *Session, b llama.Batch, logits, hidden []float32) error {
	c := &groupCall{req: &llama.Request{State: s.state, Batch: b, Logits: logits, Hidden: hidden}, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.waiting[s] = c
	delete(g.late, s)
	g.drive()
	wait := g.wait
	g.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-c.done:
		case <-t.C:
			// The members that have not come back are late: the next pass
			// runs without them (they join the one after they return).
			g.mu.Lock()
			for _, m := range g.active {
				if g.waiting[m] == nil && !g.inPass[m] {
					g.late[m] = true
				}
			}
			g.drive()
			g.mu.Unlock()
		}
		t.Stop()
	}
	<-c.done
	return c.req.Err
}
