// Package emu runs Metal kernels on the CPU, for tests on machines without
// a Mac. It compiles a .metal file as C++20 with clang and the shim headers
// in shim/ (MSL types, address spaces, simdgroup functions and matrices,
// barriers), links it with a dispatcher that runs every threadgroup's
// threads as fibers with real barrier and simdgroup semantics, and runs one
// dispatch per process with guard pages around every buffer.
//
// Each dispatch runs in several thread orders (DefaultOrders: forward,
// reverse, random) from the same buffers, and results that differ bit for
// bit between them are an error, so a missing barrier cannot hide behind a
// lucky order. Each kernel file compiles in two variants, with FMA
// contraction off and fast (Contract), for tests that require results
// within tolerance both ways. What Apple's compiler refuses and clang does
// not is refused here too: double, the C and C++ libraries, variable-length
// arrays (by poisoned names and -Werror flags), recursion, function
// pointers and lambdas (refuse.go, on the front end's IR).
//
// It checks kernel logic (indexing, reductions, tails, barriers); it cannot
// check what only Apple's compiler knows (other MSL-only rules, performance). The
// compiler is clang++ 16 or newer: scripts/install-clang.sh installs it, and
// REDRAFTER_CLANGXX names a specific one.
package emu

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

//go:embed shim
var shim embed.FS

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

// Builder compiles kernel files into runnable programs under one directory,
// each distinct source once.
type Builder struct {
	dir string
	cxx string

	mu     sync.Mutex
	driver *onceResult
	progs  map[string]*onceResult
}

type onceResult struct {
	once sync.Once
	prog *Program
	path string
	err  error
}

// NewBuilder returns a builder that keeps its files in dir.
func NewBuilder(dir string) (*Builder, error) {
	cxx, err := Compiler()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte(cxx + "\x00" + strings.Join(cxxFlags, " ")))
	if err := fs.WalkDir(shim, "shim", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := shim.ReadFile(p)
		h.Write([]byte(p))
		h.Write(data)
		return err
	}); err != nil {
		return nil, err
	}
	// Files are named by the hash of the shim, compiler and flags, so a kept
	// directory ($REDRAFTER_EMU_CACHE) never serves a stale build.
	dir = filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:6]))
	b := &Builder{dir: dir, cxx: cxx, progs: map[string]*onceResult{}, driver: &onceResult{}}
	if err := fs.WalkDir(shim, "shim", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := shim.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	}); err != nil {
		return nil, fmt.Errorf("emu: writing shim: %w", err)
	}
	return b, nil
}

// cxxFlags compile a kernel file. Variable-length arrays are a clang
// extension to C++ that MSL does not have, hence an error here.
var cxxFlags = []string{"-std=c++20", "-O1", "-g0", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-attributes",
	"-Wno-unused-variable", "-Wno-unused-function", "-Werror=return-type", "-Werror=uninitialized",
	"-Werror=vla-extension"}

// notMSL are names that C++ has and MSL does not: double (Apple GPUs have
// no 64-bit floats), the std namespace, and the C library, whose float
// functions (expf, sqrtf, ...) are spelled without the suffix in MSL.
// Kernel code that uses one fails to compile ("attempt to use a poisoned
// identifier"), as it would with Apple's compiler.
const notMSL = "double std memcpy memset memmove malloc calloc free printf fprintf puts abort exit " +
	"expf exp2f logf log2f sqrtf fabsf powf sinf cosf tanhf fmaxf fminf floorf ceilf roundf truncf fmaf"

func (b *Builder) shimDir() string { return filepath.Join(b.dir, "shim") }

func (b *Builder) driverObject() (string, error) {
	r := b.driver
	r.once.Do(func() {
		obj := filepath.Join(b.dir, "driver.o")
		if _, err := os.Stat(obj); err == nil {
			r.path = obj
			return
		}
		args := append(append([]string{}, cxxFlags...), "-I", b.shimDir(), "-c", filepath.Join(b.shimDir(), "driver.cpp"), "-o", obj+".tmp")
		if r.err = run(b.cxx, args...); r.err == nil {
			r.path, r.err = obj, os.Rename(obj+".tmp", obj)
		}
	})
	return r.path, r.err
}

// threadgroupAttrRE finds [[threadgroup(i)]]: "threadgroup" is a macro in the
// shim, so the attribute is renamed before compiling.
var threadgroupAttrRE = regexp.MustCompile(`\[\[\s*threadgroup\s*\(`)

// Build compiles one kernel file (name is used in messages; src is the
// file with its includes inlined, as the device compiles it).
func (b *Builder) Build(name, src string) (*Program, error) {
	sum := sha256.Sum256([]byte(name + "\x00" + src))
	key := hex.EncodeToString(sum[:8])
	b.mu.Lock()
	r, ok := b.progs[key]
	if !ok {
		r = &onceResult{}
		b.progs[key] = r
	}
	b.mu.Unlock()
	r.once.Do(func() { r.prog, r.err = b.build(name, src, key) })
	return r.prog, r.err
}

func (b *Builder) build(name, src, key string) (*Program, error) {
	kernels, err := msl.Parse(name, src)
	if err != nil {
		return nil, err
	}
	if len(kernels) == 0 {
		return nil, fmt.Errorf("emu: %s instantiates no kernels", name)
	}
	var tu strings.Builder
	// The shim comes first, so that what it alone may use (the C and C++
	// libraries) can be poisoned for the kernel: MSL has neither.
	tu.WriteString("#include <metal_stdlib>\n#pragma GCC poison " + notMSL + "\n")
	fmt.Fprintf(&tu, "#line 1 %q\n", name)
	tu.WriteString(threadgroupAttrRE.ReplaceAllString(src, "[[tg_param("))
	// The generated part has its own file name, so that refuse.go's checks,
	// which look at the kernel file's functions, leave it alone.
	tu.WriteString("\n#line 1 \"<emu-generated>\"\n// Generated by internal/backend/metal/emu: one entry point per kernel.\nnamespace {\n")
	for i, k := range kernels {
		fn := k.Func
		if k.TemplateArgs != "" {
			fn += "<" + k.TemplateArgs + ">"
		}
		var binds []string
		for _, p := range k.Params {
			switch p.Attr {
			case "buffer":
				binds = append(binds, fmt.Sprintf("emu::Buf{%d}", p.Index))
			case "threadgroup":
				binds = append(binds, fmt.Sprintf("emu::Shared{%d}", p.Index))
			default:
				if !builtins[p.Attr] {
					return nil, fmt.Errorf("emu: %s: kernel %s: parameter %s has attribute [[%s]], which the emulator does not provide", name, k.Name, p.Name, p.Attr)
				}
				binds = append(binds, "emu::Attr::"+p.Attr)
			}
		}
		fmt.Fprintf(&tu, "void emu_run_%d() { emu::call(&%s, %s); }\n", i, fn, strings.Join(binds, ", "))
	}
	tu.WriteString("} // namespace\n\nemu::Entry emu_entries[] = {\n")
	for i, k := range kernels {
		fmt.Fprintf(&tu, "\t{%q, emu_run_%d},\n", k.Name, i)
	}
	fmt.Fprintf(&tu, "};\nint emu_nentries = %d;\n", len(kernels))

	driver, err := b.driverObject()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(b.dir, strings.TrimSuffix(filepath.Base(name), ".metal")+"-"+key)
	cpp := base + ".cpp"
	if err := os.WriteFile(cpp, []byte(tu.String()), 0o644); err != nil {
		return nil, err
	}
	p := &Program{Name: name, b: b, cpp: cpp, driver: driver, base: base}
	for _, k := range kernels {
		p.Kernels = append(p.Kernels, k.Name)
	}
	// The default variant is built now, so that a kernel that does not
	// compile fails Build; the other on first use.
	if _, err := p.binary(ContractOff); err != nil {
		return nil, err
	}
	return p, nil
}

// Contract is how the compiler may fuse a multiply and an add into one
// fused multiply-add (one rounding instead of two). Apple's compiler may
// fuse them, and where it does is its own choice, so a kernel is only right
// if its results are within tolerance both ways.
type Contract int

const (
	// ContractOff never fuses (-ffp-contract=off): every product and sum is
	// rounded, as written.
	ContractOff Contract = iota
	// ContractFast fuses wherever it can, across statements too
	// (-ffp-contract=fast, with the host's FMA instructions).
	ContractFast
)

func (c Contract) String() string {
	if c == ContractFast {
		return "fp-contract=fast"
	}
	return "fp-contract=off"
}

// flags are the compiler flags of c. x86-64's baseline has no FMA
// instruction, so without -march=native (which has it on any x86-64 since
// 2013, and never uses what the host lacks) -ffp-contract=fast would fuse
// nothing; arm64 always has FMA.
func (c Contract) flags() []string {
	if c != ContractFast {
		return []string{"-ffp-contract=off"}
	}
	if runtime.GOARCH == "amd64" {
		return []string{"-ffp-contract=fast", "-march=native"}
	}
	return []string{"-ffp-contract=fast"}
}

// binary returns the path of the program compiled with c, compiling it on
// first use.
func (p *Program) binary(c Contract) (string, error) {
	if c != ContractOff && c != ContractFast {
		return "", fmt.Errorf("emu: unknown contraction mode %d", c)
	}
	r := &p.variants[c]
	r.once.Do(func() {
		path := p.base
		if c == ContractFast {
			path += "-fast"
		}
		if _, err := os.Stat(path); err == nil {
			r.path = path
			return
		}
		front := append(append(append([]string{}, cxxFlags...), c.flags()...), "-I", p.b.shimDir())
		if c == ContractFast {
			// Checked (refuse.go) when the default variant was built.
			args := append(front, "-x", "c++", p.cpp, "-x", "none", p.driver, "-o", path+".tmp")
			if err := run(p.b.cxx, args...); err != nil {
				r.err = fmt.Errorf("emu: compiling %s (%v): %w", p.Name, c, err)
				return
			}
		} else {
			// The front end's IR, unoptimised, is checked for what Metal
			// refuses, then optimised and linked. -O1 with the LLVM passes
			// disabled: -O0 would mark every function optnone.
			ll := p.base + ".ll"
			args := append(front, "-gline-tables-only", "-Xclang", "-disable-llvm-passes", "-S", "-emit-llvm", "-x", "c++", p.cpp, "-o", ll)
			if err := run(p.b.cxx, args...); err != nil {
				r.err = fmt.Errorf("emu: compiling %s (%v): %w", p.Name, c, err)
				return
			}
			data, err := os.ReadFile(ll)
			if err != nil {
				r.err = err
				return
			}
			os.Remove(ll)
			if r.err = checkIR(p.Name, string(data)); r.err != nil {
				return
			}
			args = append(append([]string{"-O1"}, c.flags()...), "-x", "ir", "-", "-x", "none", p.driver, "-o", path+".tmp")
			cmd := exec.Command(p.b.cxx, args...)
			cmd.Stdin = bytes.NewReader(data)
			if out, err := cmd.CombinedOutput(); err != nil {
				r.err = fmt.Errorf("emu: compiling %s (%v): %w\n%s", p.Name, c, err, out)
				return
			}
		}
		r.path, r.err = path, os.Rename(path+".tmp", path)
	})
	return r.path, r.err
}

var builtins = map[string]bool{
	"thread_position_in_grid":        true,
	"thread_position_in_threadgroup": true,
	"threadgroup_position_in_grid":   true,
	"threads_per_threadgroup":        true,
	"threadgroups_per_grid":          true,
	"threads_per_grid":               true,
	"thread_index_in_threadgroup":    true,
	"thread_index_in_simdgroup":      true,
	"simdgroup_index_in_threadgroup": true,
	"threads_per_simdgroup":          true,
	"simdgroups_per_threadgroup":     true,
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

// Program is one compiled kernel file.
type Program struct {
	Name    string   // the .metal file
	Kernels []string // host names, in instantiation order

	b                 *Builder
	cpp, driver, base string
	variants          [2]onceResult // by Contract
}

// Buffer is one device buffer of a dispatch. Run replaces Data with the
// buffer's contents after the dispatch.
type Buffer struct {
	Index int
	Data  []byte
}

// Dispatch is one dispatchThreadgroups call.
type Dispatch struct {
	Kernel      string
	Grid        [3]int // threadgroups
	Group       [3]int // threads per threadgroup
	Buffers     []Buffer
	Threadgroup map[int]int // threadgroup memory length by index
	// Contract is the variant of the program that runs the dispatch.
	Contract Contract
	// Orders are the thread orders to run the dispatch in, each from the
	// same buffers; results that differ bit for bit between them are an
	// error (a race). Nil means DefaultOrders.
	Orders []Order
}

// Order is an order of running threads: which ready thread of a
// threadgroup the scheduler resumes first at each step, and the order of
// the threadgroups. A thread runs until it waits at a barrier or in a
// simdgroup collective, so the order decides which writes a thread that
// should have waited, and did not, sees.
type Order struct {
	kind uint32
	seed uint64
}

var (
	// Forward runs threads by increasing index, threadgroups by increasing
	// position (x fastest).
	Forward = Order{kind: 0}
	// Reverse runs threads and threadgroups by decreasing index.
	Reverse = Order{kind: 1}
)

// Random runs threads in a new random order at every scheduling pass, and
// threadgroups in a random order, from seed.
func Random(seed uint64) Order { return Order{kind: 2, seed: seed} }

// Wire is the order as the dispatcher's request encodes it (kind, seed),
// for other emulators on the same dispatcher (internal/backend/cuda/emu).
func (o Order) Wire() (kind uint32, seed uint64) { return o.kind, o.seed }

func (o Order) String() string {
	switch o.kind {
	case 0:
		return "forward"
	case 1:
		return "reverse"
	}
	return fmt.Sprintf("random(%d)", o.seed)
}

// DefaultOrders is forward, reverse and one random order: with forward
// alone, a missing barrier before a thread reads what a lower thread wrote
// goes unseen; reverse sees it, and forward sees the mirror image; the
// random order mixes both within a threadgroup. The seed is fixed so that
// a failure replays.
var DefaultOrders = []Order{Forward, Reverse, Random(0x5eed)}

// Run executes the dispatch and copies the results into d.Buffers.
func (p *Program) Run(d *Dispatch) error {
	var req bytes.Buffer
	u32 := func(v int) { _ = binary.Write(&req, binary.LittleEndian, uint32(v)) }
	u64 := func(v int) { _ = binary.Write(&req, binary.LittleEndian, uint64(v)) }
	req.WriteString("EMU2")
	u32(len(d.Kernel))
	req.WriteString(d.Kernel)
	for _, v := range d.Grid {
		u32(v)
	}
	for _, v := range d.Group {
		u32(v)
	}
	u32(len(d.Buffers))
	for _, b := range d.Buffers {
		u32(b.Index)
		u64(len(b.Data))
		req.Write(b.Data)
	}
	u32(len(d.Threadgroup))
	for i := 0; i < 8; i++ {
		if n, ok := d.Threadgroup[i]; ok {
			u32(i)
			u64(n)
		}
	}
	orders := d.Orders
	if orders == nil {
		orders = DefaultOrders
	}
	u32(len(orders))
	for _, o := range orders {
		u32(int(o.kind))
		_ = binary.Write(&req, binary.LittleEndian, o.seed)
	}
	path, err := p.binary(d.Contract)
	if err != nil {
		return err
	}
	cmd := exec.Command(path)
	cmd.Stdin = &req
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("emu: %s (%v): %s grid %v group %v: %s", p.Name, d.Contract, d.Kernel, d.Grid, d.Group, msg)
	}
	out := stdout.Bytes()
	for i := range d.Buffers {
		n := len(d.Buffers[i].Data)
		if len(out) < n {
			return fmt.Errorf("emu: %s: %s: short reply", p.Name, d.Kernel)
		}
		copy(d.Buffers[i].Data, out[:n])
		out = out[n:]
	}
	return nil
}

// List asks the compiled program for its kernel names, as the dispatcher
// sees them.
func (p *Program) List() ([]string, error) {
	path, err := p.binary(ContractOff)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("emu: %s --list: %w", p.Name, err)
	}
	return strings.Fields(string(out)), nil
}
