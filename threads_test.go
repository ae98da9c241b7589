package redrafter

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Options.Threads: a count outside 0..4×NumCPU is an error before any
// work (it once reached the CPU backend's pool unchecked), and one worker
// decodes the same tokens as the default.
func TestOptionsThreads(t *testing.T) {
	for _, n := range []int{-1, 4*runtime.NumCPU() + 1, 1 << 31} {
		if e, err := Load(stories, Options{Backend: "cpu", Threads: n}); err == nil {
			e.Close()
			t.Errorf("Threads %d: loaded, want an error", n)
		} else if !strings.Contains(err.Error(), "threads") {
			t.Errorf("Threads %d: error %q does not name threads", n, err)
		}
	}
	gen := func(threads int) []int32 {
		e, err := Load(stories, Options{Backend: "cpu", Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		res, err := e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: 24, Draft: DraftOptions{Off: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	if one, all := gen(1), gen(0); !slices.Equal(one, all) || len(one) != 24 {
		t.Errorf("1 thread: %v\ndefault: %v", one, all)
	}
}
