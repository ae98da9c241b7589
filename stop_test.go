package redrafter

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
)

// The text ends before the earliest occurrence of any stop string, whatever
// the list's order: " there" starts before the "e" inside it.
func TestStopStringsEarliestFirst(t *testing.T) {
	e := load(t, Options{})
	full, err := e.Generate(context.Background(), "Once upon a time,", GenerateOptions{MaxTokens: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(full.Text, " there") {
		t.Fatalf("the continuation %q does not start with \" there\"", full.Text)
	}
	for _, stops := range [][]string{{"e", " there"}, {" there", "e"}, {"was", " there", "e"}} {
		res, err := e.Generate(context.Background(), "Once upon a time,", GenerateOptions{MaxTokens: 10, Stop: stops}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != "" || res.Reason != StopString {
			t.Errorf("stop %q: %q (%s), want \"\" (stop): \" there\" starts first", stops, res.Text, res.Reason)
		}
	}
}

// Over random texts, token boundaries and stop lists, the stop writer's
// text is the whole decoded text cut before the earliest occurrence of any
// stop string, and what it streams is that text.
func TestStopWriterCutsAtEarliestMatch(t *testing.T) {
	e := load(t, Options{})
	tok := e.tok
	words := []string{"the", "there", "here", "a", "e", "cat", "sat", " ", ", ", "re", "he"}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(2) == 0 {
				b.WriteByte(' ')
			}
		}
		ids := tok.Encode(b.String(), false)
		full := tok.Decode(ids)
		var stops []string
		for range 1 + rng.IntN(3) {
			if len(full) > 0 && rng.IntN(4) > 0 {
				i := rng.IntN(len(full))
				stops = append(stops, full[i:min(len(full), i+1+rng.IntN(6))])
			} else {
				stops = append(stops, words[rng.IntN(len(words))])
			}
		}
		want, wantStop := full, false
		for _, s := range stops {
			if i := strings.Index(full, s); i >= 0 && i < len(want) {
				want, wantStop = full[:i], true
			}
		}
		var streamed strings.Builder
		w := newStopWriter(tok, nil, stops, func(s string) error { streamed.WriteString(s); return nil })
		stopped := false
		for _, id := range ids {
			if stopped, _ = w.add(id); stopped {
				break
			}
		}
		if !stopped {
			stopped, _ = w.flush()
		}
		if got := w.text.String(); got != want || streamed.String() != want || stopped != wantStop {
			t.Fatalf("trial %d: text %q, stops %q: got %q (streamed %q, stopped %v), want %q (stopped %v)",
				trial, full, stops, got, streamed.String(), stopped, want, wantStop)
		}
	}
}
