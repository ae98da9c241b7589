package main

import (
	"strings"
	"testing"
)

// REDRAFTER_BACKEND is the default of --backend, read when the command line
// is built; the flag wins over it.
func TestBackendEnv(t *testing.T) {
	t.Setenv("REDRAFTER_BACKEND", "tpu")
	if _, _, err := run(t, "", "generate", "--model", stories, "--max-tokens", "1"); err == nil || !strings.Contains(err.Error(), `unknown backend "tpu"`) {
		t.Errorf("REDRAFTER_BACKEND=tpu: err = %v, want unknown backend \"tpu\"", err)
	}
	if _, _, err := run(t, "", "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "1"); err != nil {
		t.Errorf("REDRAFTER_BACKEND=tpu --backend cpu: %v", err)
	}
	t.Setenv("REDRAFTER_BACKEND", "")
	if _, _, err := run(t, "", "generate", "--model", stories, "--max-tokens", "1"); err != nil {
		t.Errorf("REDRAFTER_BACKEND empty (auto): %v", err)
	}
}
