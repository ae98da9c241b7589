package redrafter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// closeBegun reports whether Close of s (or of its engine, engine) has
// cancelled s's generation: both cancel under e.mu as they mark closed.
func closeBegun(s *Session, engine bool) bool {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if engine {
		return s.e.closed
	}
	return s.closed
}

// closingGeneration runs a long generation on s in the background. Its
// first text waits until closeBegun, so the generation is certainly running
// when Close comes, and meets the cancellation at its next step.
func closingGeneration(s *Session, engine bool, opt GenerateOptions) (started chan struct{}, result chan error) {
	started, result = make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := s.Generate(context.Background(), "Once upon a time", opt, func(string) error {
			once.Do(func() {
				close(started)
				for !closeBegun(s, engine) {
					time.Sleep(time.Millisecond)
				}
			})
			return nil
		})
		result <- err
	}()
	return started, result
}

// Session.Close while its Generate runs on another goroutine ends the
// generation with ErrClosed and frees the cache only after it returned (it
// was a nil-pointer panic and a data race: run with -race, as make test
// does, which reports a free under a running generation), with and without
// a draft head, alone and in a Group.
func TestConcurrentSessionClose(t *testing.T) {
	e := load(t, Options{})
	if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
		t.Fatal(err)
	}
	g := e.NewGroup()
	defer g.Close()
	for _, c := range []struct {
		name  string
		group bool
		opt   GenerateOptions
	}{
		{"autoregressive", false, GenerateOptions{Draft: DraftOptions{Off: true}}},
		{"redrafter", false, GenerateOptions{}},
		{"group", true, GenerateOptions{Draft: DraftOptions{Off: true}}},
	} {
		newSession := e.NewSession
		if c.group {
			newSession = g.NewSession
		}
		s, err := newSession()
		if err != nil {
			t.Fatal(err)
		}
		started, result := closingGeneration(s, false, c.opt)
		<-started
		s.Close()
		if err := <-result; !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Generate during Close returned %v, want ErrClosed", c.name, err)
		}
		if _, err := s.Generate(context.Background(), "x", GenerateOptions{MaxTokens: 1}, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Generate after Close: %v, want ErrClosed", c.name, err)
		}
		s.Close() // twice: harmless
	}
}

// Engine.Close while sessions generate (one alone, one with the draft head,
// one in a Group) ends each with ErrClosed before the weights go (it was a
// SIGSEGV in a CPU kernel).
func TestConcurrentEngineClose(t *testing.T) {
	e := load(t, Options{})
	if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
		t.Fatal(err)
	}
	g := e.NewGroup()
	defer g.Close()
	opts := []GenerateOptions{{Draft: DraftOptions{Off: true}}, {}, {Draft: DraftOptions{Off: true}}}
	var sessions []*Session
	var results []chan error
	for i, opt := range opts {
		newSession := e.NewSession
		if i == 2 {
			newSession = g.NewSession
		}
		s, err := newSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		started, result := closingGeneration(s, true, opt)
		<-started
		sessions = append(sessions, s)
		results = append(results, result)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for i, result := range results {
		if err := <-result; !errors.Is(err, ErrClosed) {
			t.Errorf("session %d: Generate during Engine.Close returned %v, want ErrClosed", i, err)
		}
	}
	if _, err := sessions[0].Generate(context.Background(), "x", GenerateOptions{MaxTokens: 1}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Generate after Engine.Close: %v, want ErrClosed", err)
	}
	if _, err := e.NewSession(); !errors.Is(err, ErrClosed) {
		t.Errorf("NewSession after Engine.Close: %v, want ErrClosed", err)
	}
}
