package cudatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudacheck"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestOpCases runs every op case (package opcases, shared with Metal) on
// the CUDA backend over the fake driver with emulated kernels, against the
// CPU reference: the encoder's shapes, strides, offsets and launch
// geometry, not only the kernels, must be right. Every kernel of the .cu
// files must be launched by some case.
func TestOpCases(t *testing.T) {
	t.Parallel()
	x := NewEmulator(t, nil)
	be := cudafake.NewBackend(x.Exec)
	defer be.Close()
	ref := cpu.NewReference()
	// The one-row quantized cases run again at each narrower width, each
	// width being kernels of its own.
	for _, c := range cudacheck.WithEveryQMV1Width(opcases.All(rand.New(rand.NewPCG(1, 14)))) {
		t.Run(c.Name, func(t *testing.T) {
			if diff, err := opcases.Check(be, ref, c); err != nil {
				t.Fatal(err)
			} else if diff != "" {
				t.Errorf("cuda: %s", diff)
			}
		})
	}
	if t.Failed() || strings.Contains(flagRun(), "/") {
		return
	}
	var all []string
	for _, f := range shaders.Files() {
		names, err := shaders.Kernels(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, names...)
	}
	ran := x.Ran()
	var missing []string
	for _, k := range all {
		// read_xor_u32 is bench's bandwidth probe, not an op: TestKernels
		// and the self-test (below) check it.
		if ran[k] == 0 && k != "read_xor_u32" {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("no op case launches %d of the %d kernels: %v", len(missing), len(all), missing)
	}
}

func flagRun() string {
	for i, a := range os.Args {
		if v, ok := strings.CutPrefix(a, "-test.run="); ok {
			return v
		}
		if a == "-test.run" && i+1 < len(os.Args) {
			return os.Args[i+1]
		}
	}
	return ""
}

// TestSelfTestEmulated runs `go run -tags cuda ./internal/cmd/gpucheck`'s check on
// the emulated device: every kernel covered, every verdict ok, and the
// report says so.
func TestSelfTestEmulated(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs every op case through the emulator (about 10 s)")
	}
	be := NewEmulated(t)
	defer be.Close()
	vs, err := cudacheck.SelfTest(be, cpu.NewReference(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if !cudacheck.Write(&buf, be.Device(), vs) {
		t.Errorf("self-test failed on the emulated device:\n%s", buf.String())
	}
	if want := fmt.Sprintf("%d passed, 0 failed", len(vs)); !strings.Contains(buf.String(), want) {
		t.Errorf("report:\n%s", buf.String())
	}
}

// TestLaunchFailureNamesKernel: a kernel that fails on the device (the
// fake reports it at the next synchronisation, as a GPU does) is an error
// of the Run naming the kernel, through the graph and through a whole
// generation, never a crash; the backend serves the next Run.
func TestLaunchFailureNamesKernel(t *testing.T) {
	x := NewEmulator(t, nil)
	fail := true
	be := cudafake.NewBackend(func(l *cudafake.Launch) error {
		if fail && l.Kernel == "rms_norm_f32" {
			return errors.New("unspecified launch failure")
		}
		return x.Exec(l)
	})
	defer be.Close()
	g := graph.New()
	xa, wa := g.Input("x", graph.F32, 2, 8), g.Input("w", graph.F32, 8)
	y := graph.RMSNorm(xa, wa, 1e-5)
	in := map[*graph.Array]any{xa: make([]float32, 16), wa: make([]float32, 8)}
	read := func(p *graph.Plan) error { return p.Read(y, make([]float32, 16)) }
	err := graph.Eval(be, in, read, y)
	if err == nil || !strings.Contains(err.Error(), "rms_norm_f32") || !strings.Contains(err.Error(), "unspecified launch failure") {
		t.Fatalf("err = %v, want the kernel's name and the driver's message", err)
	}
	fail = false
	if err := graph.Eval(be, in, read, y); err != nil {
		t.Fatalf("the next run: %v", err)
	}

	fail = true
	graph.RegisterForTest(t, "cuda-failing", func() (graph.Backend, error) { return be, nil })
	root, err := tools.Root()
	if err != nil {
		t.Fatal(err)
	}
	e, err := redrafter.Load(filepath.Join(root, "models", "stories260K", "stories260K.gguf"), redrafter.Options{Backend: "cuda-failing"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Generate(context.Background(), "Once", redrafter.GenerateOptions{MaxTokens: 4, Draft: redrafter.DraftOptions{Off: true}}, nil)
	if err == nil || !strings.Contains(err.Error(), "rms_norm_f32") {
		t.Errorf("generate: err = %v, want the failed kernel named", err)
	}
}
