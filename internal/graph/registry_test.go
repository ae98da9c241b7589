package graph_test

import (
	"errors"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Register panics on a name already registered, as database/sql.Register
// does: "cpu" is registered by the CPU backend this test imports.
func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering \"cpu\" twice did not panic")
		}
	}()
	graph.Register("cpu", func() (graph.Backend, error) { return nil, errors.New("never opened") })
}

// RegisterForTest replaces a registration for one test, and its cleanup
// puts back what was there, or nothing.
func TestRegisterForTestRestores(t *testing.T) {
	t.Run("replace", func(t *testing.T) {
		graph.RegisterForTest(t, "cpu", func() (graph.Backend, error) { return nil, errors.New("replaced") })
		graph.RegisterForTest(t, "test-only", func() (graph.Backend, error) { return nil, errors.New("test-only") })
		if _, err := graph.Open("cpu"); err == nil || err.Error() != "replaced" {
			t.Errorf("cpu during the test: %v, want the replacement's error", err)
		}
	})
	if be, err := graph.Open("cpu"); err != nil || be.Name() != "cpu" {
		t.Errorf("cpu after the test: %v, %v: want the CPU backend back", be, err)
	}
	if _, err := graph.Open("test-only"); err == nil {
		t.Error("test-only is still registered after its test")
	}
}
