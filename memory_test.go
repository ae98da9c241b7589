package redrafter

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// smallMemory is the CPU backend on a machine with limit bytes of memory.
type smallMemory struct {
	graph.Backend
	limit int64
}

func (b smallMemory) MemoryLimit() int64 { return b.limit }

var registerSmall sync.Once

// loadSmall loads the demo model (a KV cache of 1280 bytes a token, 2048
// tokens) on a backend that holds 2 MiB.
func loadSmall(t *testing.T, opt Options) (*Engine, error) {
	registerSmall.Do(func() {
		graph.Register("cpu-2mib", func() (graph.Backend, error) { return smallMemory{cpu.New(1), 2 << 20}, nil })
	})
	opt.Backend = "cpu-2mib"
	e, err := Load(stories, opt)
	if err == nil {
		t.Cleanup(func() { e.Close() })
	}
	return e, err
}

// The model's own context is lowered, with a warning, to what fits in half
// the backend's memory; a context asked for that cannot fit is an error
// before any allocation; one that fits is kept.
func TestContextFitsMemory(t *testing.T) {
	var logs bytes.Buffer
	e, err := loadSmall(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// 1 MiB / 1280 bytes = 819 tokens, rounded down to a multiple of 1024
	// only when there are that many: 819.
	if got := e.Context(); got != 819 {
		t.Errorf("context %d, want 819 (half of 2 MiB of 1280-byte tokens)", got)
	}
	if !strings.Contains(logs.String(), "does not fit in memory") || !strings.Contains(logs.String(), "context=819") {
		t.Errorf("no warning about the lowered context: %q", logs.String())
	}
	if _, err := e.Generate(context.Background(), "Once", GenerateOptions{MaxTokens: 8}, nil); err != nil {
		t.Fatal(err)
	}

	if _, err := loadSmall(t, Options{Context: 2048}); err == nil || !strings.Contains(err.Error(), "2048 tokens needs") {
		t.Errorf("a context of 2048 (2.5 MiB) on 2 MiB: %v, want an error", err)
	}
	e, err = loadSmall(t, Options{Context: 1600})
	if err != nil || e.Context() != 1600 {
		t.Errorf("a context of 1600 (2.0 MB) on 2 MiB: %v", err)
	}
}
