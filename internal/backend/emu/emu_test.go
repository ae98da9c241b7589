package emu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCompileWaitsForAnotherBuild checks that a build waits for another
// process building the same program (here: this test, holding the
// program's lock file) and then takes its file rather than building it
// again: cuda's and cudatest's tests start together in make test and want
// the same programs.
func TestCompileWaitsForAnotherBuild(t *testing.T) {
	dir := t.TempDir()
	b, err := NewBuilder(dir, nil)
	Require(t, err)
	u := Unit{Name: "k.cpp", Source: "#include \"emu.h\"\nemu::Entry emu_entries[] = {};\nint emu_nentries = 0;\n"}
	// Compile's own name for u's program.
	sum := sha256.Sum256([]byte(u.Name + "\x00" + u.Source + "\x00"))
	path := filepath.Join(b.dir, "k-"+hex.EncodeToString(sum[:8]))
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		path string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := b.Compile(u)
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Compile returned %v, %v while another build held the lock", r.path, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	// The other build's program: not what clang would write.
	other := []byte("the other process's program")
	if err := os.WriteFile(path, other, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock()
	r := <-done
	if r.err != nil || r.path != path {
		t.Fatalf("Compile: %v, %v; want %s", r.path, r.err, path)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, other) {
		t.Errorf("Compile built the program again (%d bytes) after the other build's", len(got))
	}
}
