package emu

import (
	"errors"
	"maps"
	"os"
	"sync"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// The build directory a test binary's emulators share: a temporary one,
// removed by Main or Cleanup, or $REDRAFTER_EMU_CACHE, kept.
var (
	dirMu   sync.Mutex
	tempDir string
)

func buildDir() (string, error) {
	if dir := envvar.EmuCache.Get(); dir != "" {
		return dir, os.MkdirAll(dir, 0o755)
	}
	dirMu.Lock()
	defer dirMu.Unlock()
	if tempDir == "" {
		dir, err := os.MkdirTemp("", "redrafter-emu-")
		if err != nil {
			return "", err
		}
		tempDir = dir
	}
	return tempDir, nil
}

// Main runs a test binary's tests and then removes the programs its
// emulators compiled (kept in $REDRAFTER_EMU_CACHE when that is set). Use
// it from TestMain, through the backend's harness (metaltest.Main,
// cudatest.Main, the same function):
//
//	func TestMain(m *testing.M) { os.Exit(emu.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	Cleanup()
	return code
}

// Cleanup removes the compiled programs, for a TestMain that does not run
// its tests through Main.
func Cleanup() {
	dirMu.Lock()
	defer dirMu.Unlock()
	if tempDir != "" {
		os.RemoveAll(tempDir)
		tempDir = ""
	}
}

// Require ends tb when err, an emulator's failure to start, is not nil:
// without a compiler (ErrNoCompiler) tb is skipped with a line saying it
// did not pass, except under CI (CI set), where it fails: CI must install
// clang (scripts/install-clang.sh).
func Require(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrNoCompiler) && envvar.CI.Get() == "" {
		tb.Skipf("SKIPPED, NOT PASSED: %v", err)
	}
	tb.Fatal(err)
}

// Shared is a value built once per test binary over the shared build
// directory: a language's Builder for its tests.
type Shared[T any] struct {
	once sync.Once
	v    T
	err  error
}

// Get returns the value, building it with build on first use; a failure
// ends tb as Require does, on every call.
func (s *Shared[T]) Get(tb testing.TB, build func(dir string) (T, error)) T {
	tb.Helper()
	s.once.Do(func() {
		var dir string
		if dir, s.err = buildDir(); s.err == nil {
			s.v, s.err = build(dir)
		}
	})
	Require(tb, s.err)
	return s.v
}

// Sources gives a kernel file's source to a test harness's executor: the
// embedded file, or what a test put in its place to plant a bug.
type Sources struct {
	// Embedded returns a file as the backend ships it.
	Embedded func(file string) (string, error)
	// Override maps a file name to the source that replaces it.
	Override map[string]string
	// Prepare, when set, turns an override into what the emulator
	// compiles (Metal inlines its includes, as the embedded files are).
	Prepare func(file, src string) (string, error)
}

// Source returns the source of file.
func (s *Sources) Source(file string) (string, error) {
	src, ok := s.Override[file]
	if !ok {
		return s.Embedded(file)
	}
	if s.Prepare != nil {
		return s.Prepare(file, src)
	}
	return src, nil
}

// Tally counts the dispatches of each kernel a harness's executor has
// run. It is safe for concurrent use.
type Tally struct {
	mu  sync.Mutex
	ran map[string]int
}

// Add counts one dispatch of kernel.
func (t *Tally) Add(kernel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ran == nil {
		t.ran = map[string]int{}
	}
	t.ran[kernel]++
}

// Ran returns how many dispatches of each kernel have run.
func (t *Tally) Ran() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ran == nil {
		return map[string]int{}
	}
	return maps.Clone(t.ran)
}
