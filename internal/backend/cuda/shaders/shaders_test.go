package shaders_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// TestPTXUpToDate regenerates the PTX of every .cu file with clang-16 and
// fails where it differs from the checked-in (embedded) PTX.
func TestPTXUpToDate(t *testing.T) {
	tools.Need(t, tools.ClangPath)
	// One clang a file, in parallel: the files take from a second to a
	// minute each, and the package often runs alone at the end of make test.
	for _, f := range shaders.Files() {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			got, err := tools.CompilePTX(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := shaders.PTX(f)
			if err != nil {
				t.Fatalf("%s has no checked-in PTX: run go generate ./backend/cuda/shaders", f)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("ptx/%s is not what clang writes from %s: run go generate ./backend/cuda/shaders", filepath.Base(f[:len(f)-3])+".ptx", f)
			}
		})
	}
}

// Limits a kernel must stay within on every GPU we target: static shared
// memory (48 KiB without opting in) and no register spills.
const maxSharedBytes = 48 << 10

var (
	functionRE = regexp.MustCompile(`Compiling entry function '([A-Za-z0-9_]+)' for '(sm_[0-9]+)'`)
	spillRE    = regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	smemRE     = regexp.MustCompile(`Used (\d+) registers, (\d+) bytes smem`)
)

// ptxasReport runs ptxas -v on ptx for arch and returns per kernel its
// spill bytes and shared memory.
func ptxasReport(ptxas string, ptx []byte, arch string) (map[string][2]int, error) {
	cmd := exec.Command(ptxas, "-v", "--gpu-name", arch, "-o", "/dev/null", "-")
	cmd.Stdin = bytes.NewReader(ptx)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ptxas %s: %v\n%s", arch, err, out)
	}
	rep := map[string][2]int{}
	cur := ""
	for _, line := range bytes.Split(out, []byte("\n")) {
		if m := functionRE.FindSubmatch(line); m != nil {
			cur = string(m[1])
			rep[cur] = [2]int{}
		} else if m := spillRE.FindSubmatch(line); m != nil && cur != "" {
			st, _ := strconv.Atoi(string(m[1]))
			ld, _ := strconv.Atoi(string(m[2]))
			r := rep[cur]
			r[0] += st + ld
			rep[cur] = r
		} else if m := smemRE.FindSubmatch(line); m != nil && cur != "" {
			sm, _ := strconv.Atoi(string(m[2]))
			r := rep[cur]
			r[1] = sm
			rep[cur] = r
		}
	}
	return rep, nil
}

// TestPtxas assembles every kernel for sm_90 (H100, H200: the GPUs measured)
// and, in the full run (make test-all), sm_80 (A100) with NVIDIA's ptxas
// and fails on a rejected kernel, a register spill, or shared memory over
// the limit. (ptxas takes a minute or more an architecture on a 2-core
// machine; the two have not disagreed on a kernel yet.)
func TestPtxas(t *testing.T) {
	ptxas := tools.Need(t, tools.Ptxas)
	for _, arch := range testenv.Subset([]string{"sm_90", "sm_80"}, 0) {
		for _, f := range shaders.Files() {
			t.Run(arch+"/"+f, func(t *testing.T) {
				t.Parallel()
				ptxasCheck(t, ptxas, arch, f)
			})
		}
	}
}

// ptxasCheck is TestPtxas for one file and architecture.
func ptxasCheck(t *testing.T, ptxas, arch, f string) {
	ptx, err := shaders.PTX(f)
	if err != nil {
		t.Fatal(err)
	}
	names, err := shaders.Kernels(f)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ptxasReport(ptxas, ptx, arch)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	for _, k := range names {
		r, ok := rep[k]
		switch {
		case !ok:
			t.Errorf("%s %s: ptxas reported nothing for kernel %s", arch, f, k)
		case r[0] > 0:
			t.Errorf("%s %s: kernel %s spills %d bytes of registers", arch, f, k, r[0])
		case r[1] > maxSharedBytes:
			t.Errorf("%s %s: kernel %s uses %d bytes of shared memory (limit %d)", arch, f, k, r[1], maxSharedBytes)
		}
	}
}

// TestPtxasCatchesSpillsAndSharedMemory checks the checks: a kernel that
// spills and one with too much shared memory are reported as such.
func TestPtxasCatchesSpillsAndSharedMemory(t *testing.T) {
	ptxas := tools.Need(t, tools.Ptxas)
	const big = `.version 7.0
.target sm_80
.address_size 64
.visible .entry too_much_shared(.param .u64 p)
{
	.reg .b64 %rd<2>;
	.shared .align 4 .b8 buf[65536];
	mov.u64 %rd1, buf;
	ret;
}
`
	if rep, err := ptxasReport(ptxas, []byte(big), "sm_80"); err != nil {
		t.Logf("ptxas refuses 64 KiB of static shared memory outright (TestPtxas fails on that too): %v", err)
	} else if r := rep["too_much_shared"]; r[1] <= maxSharedBytes {
		t.Errorf("64 KiB of shared memory not caught: %v", r)
	}
	spill := `.version 7.0
.target sm_80
.address_size 64
.visible .entry spills(.param .u64 p)
.maxnreg 16
{
	.reg .f32 %f<200>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [p];
	cvta.to.global.u64 %rd2, %rd1;
`
	for i := 0; i < 100; i++ {
		// Volatile loads keep their order, so f0..f49 all wait for their partners.
		spill += fmt.Sprintf("\tld.volatile.global.f32 %%f%d, [%%rd2+%d];\n", i, 4*i)
	}
	for i := 0; i < 100; i++ {
		spill += fmt.Sprintf("\tadd.f32 %%f%d, %%f%d, %%f%d;\n", 100+i, i, 99-i)
	}
	for i := 0; i < 100; i++ {
		spill += fmt.Sprintf("\tst.global.f32 [%%rd2+%d], %%f%d;\n", 4*i, 100+i)
	}
	spill += "\tret;\n}\n"
	rep, err := ptxasReport(ptxas, []byte(spill), "sm_80")
	if err != nil {
		t.Fatal(err)
	}
	if r := rep["spills"]; r[0] == 0 {
		t.Errorf("a kernel held to 16 registers with 100 live values does not show spills: %v", r)
	}
}
