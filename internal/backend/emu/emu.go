// Package emu is the kernel emulator both GPU backends share, for tests on
// machines without their GPU: it compiles a kernel file as C++20 with
// clang++ and links it with a dispatcher (runtime/driver.cpp) that runs
// every threadgroup's (block's) threads as fibers with real barrier and
// simdgroup (warp) collective semantics, one dispatch per process, guard
// pages around every buffer, in several thread orders whose results must
// agree to the bit.
//
// What is a language's own stays with it: internal/backend/metal/emu adds
// the MSL shim and the refusals of Apple's compiler, internal/backend/cuda/emu
// the CUDA prelude. This package holds the rest: the compiler lookup, the
// fiber runtime (embedded, so that no file is read from the source tree),
// the build cache keyed by content, the thread orders, the dispatcher's wire
// format, and the test rules (testing.go). The compiler is clang++ 16 or
// newer: scripts/install-clang.sh installs it, and REDRAFTER_CLANGXX names a
// specific one.
package emu

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// runtime holds the fiber runtime: driver.cpp (the dispatcher), emu.h (its
// contract with the kernels) and collective.h (barriers and simdgroup
// collectives, over which each language spells its own functions).
//
//go:embed runtime
var runtimeFS embed.FS

// ErrNoCompiler is returned when no suitable clang++ is installed.
var ErrNoCompiler = errors.New("emu: no clang++ >= 16 found (run scripts/install-clang.sh, or set REDRAFTER_CLANGXX)")

var (
	findOnce sync.Once
	found    string
	findErr  error
)

// Compiler returns the path of the clang++ to use.
func Compiler() (string, error) {
	findOnce.Do(func() {
		cands := []string{"clang++", "clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17", "clang++-16"}
		if c := envvar.ClangXX.Get(); c != "" {
			cands = []string{c}
		}
		for _, c := range cands {
			p, err := exec.LookPath(c)
			if err != nil {
				continue
			}
			out, err := exec.Command(p, "-dumpversion").Output()
			if err != nil {
				continue
			}
			major, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0])
			if major >= 16 {
				found = p
				return
			}
		}
		findErr = ErrNoCompiler
	})
	return found, findErr
}

// cxxFlags compile a kernel file. Reading memory before writing it,
// falling off a non-void function and variable-length arrays (a clang
// extension to C++ that neither MSL nor CUDA device code has) are errors.
var cxxFlags = []string{"-std=c++20", "-O1", "-g0", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-attributes",
	"-Wno-unused-variable", "-Wno-unused-function", "-Werror=return-type", "-Werror=uninitialized",
	"-Werror=vla-extension"}

// Builder compiles translation units into programs under one directory,
// each distinct unit once.
type Builder struct {
	dir, include, cxx string

	mu     sync.Mutex
	driver *once
	progs  map[string]*once
}

type once struct {
	once sync.Once
	path string
	err  error
}

// NewBuilder returns a builder that keeps its files under dir. headers are
// the language's own include files (name to contents), written beside the
// fiber runtime's in the one include directory every unit compiles with.
// It fails with ErrNoCompiler when no clang++ >= 16 is installed.
func NewBuilder(dir string, headers map[string]string) (*Builder, error) {
	cxx, err := Compiler()
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	if err := fs.WalkDir(runtimeFS, "runtime", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := runtimeFS.ReadFile(p)
		files[d.Name()] = string(data)
		return err
	}); err != nil {
		return nil, err
	}
	for name, data := range headers {
		if _, ok := files[name]; ok {
			return nil, fmt.Errorf("emu: header %s has the name of a runtime file", name)
		}
		files[name] = data
	}
	// The directory is named by the hash of the compiler, the flags and
	// every file included, so that a kept directory ($REDRAFTER_EMU_CACHE)
	// never serves a stale build, and each language has its own.
	h := sha256.New()
	h.Write([]byte(cxx + "\x00" + strings.Join(cxxFlags, " ")))
	for _, name := range slices.Sorted(maps.Keys(files)) {
		h.Write([]byte("\x00" + name + "\x00" + files[name]))
	}
	dir = filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:6]))
	b := &Builder{dir: dir, include: filepath.Join(dir, "include"), cxx: cxx, driver: &once{}, progs: map[string]*once{}}
	if err := os.MkdirAll(b.include, 0o755); err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := writeShared(filepath.Join(b.include, name), []byte(data)); err != nil {
			return nil, fmt.Errorf("emu: writing %s: %w", name, err)
		}
	}
	return b, nil
}

// A kept directory ($REDRAFTER_EMU_CACHE) is shared by test processes
// that run at once (go test runs packages in parallel): a file another
// process may be reading is never rewritten in place, and every scratch
// file a build writes has this process's own name (scratch), renamed into
// place when whole. A build holds a lock file beside its program
// (lockFile), so that a second process wanting the same program waits for
// it rather than building it too (in make test's cold start, cuda's and
// cudatest's tests both want quant.cu first); where there is no lock, both
// build it and the second rename replaces the first's identical file.

// writeShared writes data to path unless path already holds it, through a
// scratch file and a rename, so that no reader sees it half written.
func writeShared(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp := scratch(path, ".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// scratch is path with this process's id and ext appended.
func scratch(path, ext string) string { return fmt.Sprintf("%s.%d%s", path, os.Getpid(), ext) }

func (b *Builder) driverObject() (string, error) {
	r := b.driver
	r.once.Do(func() {
		obj := filepath.Join(b.dir, "driver.o")
		if _, err := os.Stat(obj); err == nil {
			r.path = obj
			return
		}
		tmp := scratch(obj, ".tmp")
		args := append(append([]string{}, cxxFlags...), "-I", b.include, "-c", filepath.Join(b.include, "driver.cpp"), "-o", tmp)
		if r.err = run(b.cxx, args...); r.err == nil {
			r.path, r.err = obj, os.Rename(tmp, obj)
		}
	})
	return r.path, r.err
}

// Unit is one translation unit to compile into a program: a kernel file
// with what the language's emulator generated around it (the entry table
// the dispatcher finds kernels by, emu_entries and emu_nentries).
type Unit struct {
	Name   string   // the kernel file, for messages and the program's file name
	Source string   // the whole translation unit
	Flags  []string // added to the common flags
	// Variant names the flags in messages ("fp-contract=fast"), if they
	// make one of several programs of the same file.
	Variant string
	// CheckIR, when set, is given the front end's unoptimised LLVM IR
	// before the program is linked, to refuse what the device compiler
	// would (internal/backend/metal/emu's refusals); its error is
	// Compile's, as it is.
	CheckIR func(ir string) error
}

// Compile compiles u and links it with the dispatcher, returning the
// program's path. A unit is compiled once per builder, and not again from
// a kept directory: its file is named by the hash of its contents.
func (b *Builder) Compile(u Unit) (string, error) {
	sum := sha256.Sum256([]byte(u.Name + "\x00" + u.Source + "\x00" + strings.Join(u.Flags, " ")))
	stem := filepath.Base(u.Name)
	stem = strings.TrimSuffix(stem, filepath.Ext(stem))
	path := filepath.Join(b.dir, stem+"-"+hex.EncodeToString(sum[:8]))
	b.mu.Lock()
	r, ok := b.progs[path]
	if !ok {
		r = &once{}
		b.progs[path] = r
	}
	b.mu.Unlock()
	r.once.Do(func() {
		if _, err := os.Stat(path); err == nil {
			r.path = path
			return
		}
		unlock, err := lockFile(path + ".lock")
		if err != nil {
			r.err = err
			return
		}
		defer unlock()
		if _, err := os.Stat(path); err == nil { // built by another process while this one waited
			r.path = path
			return
		}
		tmp := scratch(path, ".tmp")
		r.err = b.compile(u, path, tmp)
		if r.err == nil {
			r.path, r.err = path, os.Rename(tmp, path)
		}
	})
	return r.path, r.err
}

// compile builds u's program into out (a scratch name of path's).
func (b *Builder) compile(u Unit, path, out string) error {
	driver, err := b.driverObject()
	if err != nil {
		return err
	}
	cpp := scratch(path, ".cpp")
	if err := os.WriteFile(cpp, []byte(u.Source), 0o644); err != nil {
		return err
	}
	defer os.Remove(cpp)
	what := u.Name
	if u.Variant != "" {
		what += " (" + u.Variant + ")"
	}
	front := append(append(append([]string{}, cxxFlags...), u.Flags...), "-I", b.include)
	if u.CheckIR == nil {
		if err := run(b.cxx, append(front, "-x", "c++", cpp, "-x", "none", driver, "-o", out)...); err != nil {
			return fmt.Errorf("emu: compiling %s: %w", what, err)
		}
		return nil
	}
	// The front end's IR, unoptimised, is checked, then optimised and
	// linked. -O1 with the LLVM passes disabled: -O0 would mark every
	// function optnone.
	ll := scratch(path, ".ll")
	if err := run(b.cxx, append(front, "-gline-tables-only", "-Xclang", "-disable-llvm-passes", "-S", "-emit-llvm", "-x", "c++", cpp, "-o", ll)...); err != nil {
		return fmt.Errorf("emu: compiling %s: %w", what, err)
	}
	data, err := os.ReadFile(ll)
	if err != nil {
		return err
	}
	os.Remove(ll)
	if err := u.CheckIR(string(data)); err != nil {
		return err
	}
	cmd := exec.Command(b.cxx, append(append([]string{"-O1"}, u.Flags...), "-x", "ir", "-", "-x", "none", driver, "-o", out)...)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("emu: compiling %s: %w\n%s", what, err, out)
	}
	return nil
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", filepath.Base(name), err, stderr.String())
	}
	return nil
}
