package redrafter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// groupMembers is how many sessions the group tests run at once.
const groupMembers = 8

// groupScript is member m's generation options: greedy and sampled,
// autoregressive and ReDrafter with W in {1, 2} and L in {3, 5}, both
// acceptance rules.
func groupScript(m int) (prompt string, opt GenerateOptions) {
	starts := []string{"Once upon a time", "Lily and Tom went to the park. They saw", "The cat", "One day, a little girl",
		"Tim had a big red ball", "", "The sun was", "Sam and his dog"}
	opt = GenerateOptions{MaxTokens: 40}
	sampled := Sampling{Temperature: 0.8, TopP: 0.95}
	switch m % 8 {
	case 0:
		opt.Draft.Off = true
	case 1:
		opt.Sampling, opt.Seed, opt.Draft.Off = sampled, uint64(m+1), true
	case 2:
		opt.Draft = DraftOptions{BeamWidth: 1, BeamLength: 3}
	case 3:
		opt.Draft = DraftOptions{BeamWidth: 2, BeamLength: 5}
	case 4:
		opt.Draft = DraftOptions{BeamWidth: 1, BeamLength: 5}
	case 5:
		opt.Draft = DraftOptions{BeamWidth: 2, BeamLength: 3}
	case 6:
		opt.Sampling, opt.Seed = sampled, uint64(m+1)
		opt.Draft = DraftOptions{BeamWidth: 2, BeamLength: 5}
	case 7:
		opt.Sampling, opt.Seed = sampled, uint64(m+1)
		opt.Draft = DraftOptions{BeamWidth: 1, BeamLength: 3, Accept: AcceptApple}
	}
	return starts[m%len(starts)], opt
}

// runMember runs member m's script on s: two turns of one conversation,
// the second continuing the first (it reuses the cache, and the session
// leaves the group between them).
func runMember(s *Session, m int) ([]*Result, error) {
	prompt, opt := groupScript(m)
	var out []*Result
	for _, p := range []string{prompt, " And then"} {
		if len(out) > 0 {
			p = prompt + out[0].Text + p
		}
		res, err := s.Generate(context.Background(), p, opt, nil)
		if err != nil {
			return out, fmt.Errorf("member %d: %w", m, err)
		}
		out = append(out, res)
	}
	return out, nil
}

// groupEngine opens stories260K with its bundled draft head on backend.
func groupEngine(t *testing.T, backend string) *Engine {
	t.Helper()
	e, err := Load(stories, Options{Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
		t.Fatal(err)
	}
	return e
}

// alone runs every member's script on a session of its own, one after
// another.
func alone(t *testing.T, e *Engine) [][]*Result {
	t.Helper()
	want := make([][]*Result, groupMembers)
	for m := range want {
		s, err := e.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if want[m], err = runMember(s, m); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	return want
}

// sameResults reports the members whose results differ.
func sameResults(t *testing.T, got, want [][]*Result) {
	t.Helper()
	for m := range want {
		for i, w := range want[m] {
			if i >= len(got[m]) {
				t.Errorf("member %d: turn %d missing", m, i)
				continue
			}
			r := got[m][i]
			if !slices.Equal(r.Tokens, w.Tokens) || r.Text != w.Text || r.Reason != w.Reason {
				t.Errorf("member %d turn %d:\n in the group %q (%s)\n alone        %q (%s)", m, i, r.Text, r.Reason, w.Text, w.Reason)
			}
		}
	}
}

// runGroup runs every member on a session of g at once; before releasing
// them it can hold the group's passes until all have asked for one.
func runGroup(t *testing.T, g *Group, holdFirstPass bool) [][]*Result {
	t.Helper()
	got := make([][]*Result, groupMembers)
	errs := make([]error, groupMembers)
	sessions := make([]*Session, groupMembers)
	for m := range sessions {
		s, err := g.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sessions[m] = s
	}
	if holdFirstPass {
		g.passMu.Lock()
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for m := range groupMembers {
		wg.Go(func() {
			<-start
			got[m], errs[m] = runMember(sessions[m], m)
		})
	}
	close(start)
	if holdFirstPass {
		for {
			g.mu.Lock()
			// The first member to ask is running the pass (waiting on
			// passMu); the others wait for it.
			n := len(g.waiting)
			g.mu.Unlock()
			if n == groupMembers {
				break
			}
			time.Sleep(time.Millisecond)
		}
		g.passMu.Unlock()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	return got
}

// Eight sessions of one Group generating at once (greedy and sampled,
// autoregressive and ReDrafter at four beam shapes, two turns each) give
// exactly what each gives alone, on the CPU and on Metal's fake device.
// make test runs it under -race.
func TestGroupSessionsEqualAlone(t *testing.T) {
	graph.RegisterForTest(t, "metal-fake-group", func() (graph.Backend, error) {
		return metal.NewFake(metal.Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 16}, metal.Fake{Reference: cpu.NewReference()}), nil
	})
	for _, backend := range []string{"cpu", "metal-fake-group"} {
		t.Run(backend, func(t *testing.T) {
			want := alone(t, groupEngine(t, backend))
			e := groupEngine(t, backend)
			g := e.NewGroup()
			defer g.Close()
			got := runGroup(t, g, false)
			if t.Failed() {
				return
			}
			sameResults(t, got, want)
			st := g.Stats()
			t.Logf("%+v", st)
		})
	}
}

// The group really runs its members' passes together: held until all
// eight wait, the first pass gathers all of them, and over the run a pass
// serves more than one request on average. Waiting forever for stragglers,
// every pass until the first member finishes holds all eight.
func TestGroupBatches(t *testing.T) {
	e := groupEngine(t, "cpu")
	want := alone(t, e)
	g := e.NewGroup()
	defer g.Close()
	g.SetStragglerWait(0)
	got := runGroup(t, g, true)
	sameResults(t, got, want)
	st := g.Stats()
	t.Logf("%+v", st)
	if st.MostSequences != groupMembers {
		t.Errorf("the most sequences in one pass is %d, want %d", st.MostSequences, groupMembers)
	}
	if st.Requests < 2*st.Passes {
		t.Errorf("%d requests in %d passes: the group hardly batched", st.Requests, st.Passes)
	}
	if st.Compiles >= st.Passes {
		t.Errorf("%d plans compiled for %d passes: none was reused", st.Compiles, st.Passes)
	}
}

// One member cancelled in the middle of its generation, and another whose
// callback fails, end with their partial results; the others go on and
// give what they give alone, even when the group waits forever for
// stragglers.
func TestGroupCancelOneMember(t *testing.T) {
	e := groupEngine(t, "cpu")
	want := alone(t, e)
	for _, wait := range []time.Duration{0, DefaultStragglerWait} {
		t.Run(fmt.Sprint(wait), func(t *testing.T) {
			g := e.NewGroup()
			defer g.Close()
			g.SetStragglerWait(wait)
			got := make([][]*Result, groupMembers)
			errs := make([]error, groupMembers)
			const cancelled, failing = 0, 3
			errCallback := errors.New("the client went away")
			var wg sync.WaitGroup
			for m := range groupMembers {
				s, err := g.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				wg.Go(func() {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					if m != cancelled && m != failing {
						got[m], errs[m] = runMember(s, m)
						return
					}
					prompt, opt := groupScript(m)
					pieces := 0
					res, err := s.Generate(ctx, prompt, opt, func(string) error {
						pieces++
						if pieces == 3 {
							if m == failing {
								return errCallback
							}
							cancel()
						}
						return nil
					})
					got[m], errs[m] = []*Result{res}, err
				})
			}
			wg.Wait()
			for m := range groupMembers {
				switch m {
				case cancelled:
					if !errors.Is(errs[m], context.Canceled) || got[m][0] == nil || got[m][0].Reason != StopCanceled ||
						len(got[m][0].Tokens) >= len(want[m][0].Tokens) {
						t.Errorf("cancelled member: err %v, result %+v", errs[m], got[m][0])
					}
				case failing:
					if !errors.Is(errs[m], errCallback) || got[m][0] == nil || got[m][0].Reason != StopError {
						t.Errorf("failing member: err %v, result %+v", errs[m], got[m][0])
					}
				default:
					if errs[m] != nil {
						t.Errorf("member %d: %v", m, errs[m])
					}
				}
			}
			others := slices.Clone(want)
			for _, m := range []int{cancelled, failing} {
				got[m], others[m] = nil, nil
			}
			if !t.Failed() {
				sameResults(t, got, others)
			}
		})
	}
}

// Once no member has generated for the idle time, the group frees its
// compiled passes (a server at rest gives their memory back), and members
// that generate afterwards compile again and give the same text.
func TestGroupReleasesPassesWhenIdle(t *testing.T) {
	e := groupEngine(t, "cpu")
	want := alone(t, e)
	g := e.NewGroup()
	defer g.Close()
	g.mu.Lock()
	g.idleRelease = 50 * time.Millisecond
	g.mu.Unlock()
	sameResults(t, runGroup(t, g, false), want)
	deadline := time.Now().Add(10 * time.Second)
	for g.Stats().Cached > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := g.Stats()
	if st.Cached != 0 || st.Compiles == 0 {
		t.Fatalf("%+v: want the compiled passes freed once the group is idle", st)
	}
	sameResults(t, runGroup(t, g, false), want)
	if after := g.Stats(); after.Compiles <= st.Compiles {
		t.Errorf("%+v after %+v: want passes compiled again", after, st)
	}
}

// Under load the greedy ReDrafter members shorten their beams to the
// group's row budget (8 members in 16 rows: W=1 drafts L=2, W=2 too, as
// one beam) and give the same text as alone; sampled members keep
// their beams. Without a budget every member verifies what it does alone.
func TestGroupRowBudgetShortensBeams(t *testing.T) {
	e := groupEngine(t, "cpu")
	want := alone(t, e)
	perStep := func(r *Result) float64 { return float64(r.Stats.Draft.Packed) / float64(r.Stats.Draft.Steps) }
	for _, budget := range []int{16, 0} {
		g := e.NewGroup()
		g.SetStragglerWait(0)
		g.SetRowBudget(budget)
		got := runGroup(t, g, true)
		g.Close()
		sameResults(t, got, want)
		for m := range want {
			if want[m][0].Stats.Draft == nil {
				continue
			}
			_, opt := groupScript(m)
			for i := range want[m] {
				alone, grouped := perStep(want[m][i]), perStep(got[m][i])
				t.Logf("budget %d, member %d turn %d (W=%d, L=%d): %.2f tokens verified per step, %.2f alone",
					budget, m, i, opt.Draft.BeamWidth, opt.Draft.BeamLength, grouped, alone)
				switch {
				case budget == 0 || !opt.Sampling.Greedy():
					if grouped != alone {
						t.Errorf("member %d turn %d: %.2f tokens verified per step, %.2f alone: want the same beam", m, i, grouped, alone)
					}
				case grouped >= alone:
					t.Errorf("member %d turn %d: %.2f tokens verified per step, %.2f alone: want shorter beams under load", m, i, grouped, alone)
				}
				// The drafts offered count each step's own beam length.
				d := got[m][i].Stats.Draft
				if full := d.Steps * (opt.Draft.BeamLength - 1); (d.Offered < full) != (budget > 0 && opt.Sampling.Greedy()) {
					t.Errorf("member %d turn %d: %d drafts offered in %d steps of L=%d", m, i, d.Offered, d.Steps, opt.Draft.BeamLength)
				}
			}
		}
	}
}
