//go:build cuda && linux

package cuda

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	_ "github.com/seed9b8f47b1/redrafter/internal/backend/cpu" // registers "cpu" for graph.Open("auto")
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// TestOpenWithoutGPU opens the backend through NVIDIA's real driver
// library (unpacked by scripts/install-cuda-tools.sh). Without a GPU the
// error must say so in words; on a machine with one, the backend opens,
// every module's PTX is accepted by the driver's JIT, and a plan runs.
func TestOpenWithoutGPU(t *testing.T) {
	path := tools.Need(t, tools.LibCUDA)
	d, err := openDriver(path)
	if err == nil {
		defer d.close()
		t.Logf("a GPU is present: %+v", d.info())
		be := newBackend(d)
		g := graph.New()
		x, w := g.Input("x", graph.F32, 1, 3), g.Input("w", graph.F32, 2, 3)
		y := graph.MatMul(x, w)
		var got [2]float32
		err := graph.Eval(be, map[*graph.Array]any{x: []float32{1, 2, 3}, w: []float32{1, 0, 0, 0, 1, 1}},
			func(p *graph.Plan) error { return p.Read(y, got[:]) }, y)
		if err != nil || got != [2]float32{1, 5} {
			t.Fatalf("MatMul on the GPU: %v, %v", got, err)
		}
		return
	}
	t.Logf("open: %v", err)
	if !strings.Contains(err.Error(), "no NVIDIA GPU") && !strings.Contains(err.Error(), "CUDA_ERROR") {
		t.Errorf("error %q does not say why the GPU cannot be used", err)
	}
}

// TestAutoFallsBackToCPU: on a machine without the driver or without a
// GPU, --backend cuda fails with a reason and auto picks the CPU, warning
// that it skipped CUDA.
func TestAutoFallsBackToCPU(t *testing.T) {
	if _, err := Open(); err == nil {
		t.Skip("SKIPPED, NOT PASSED: a GPU is present (the fallback cannot be seen)")
	}
	_, err := graph.Open("cuda")
	if err == nil || !strings.HasPrefix(err.Error(), "cuda: ") {
		t.Fatalf("graph.Open(cuda) = %v, want the driver's reason", err)
	}
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	be, err := graph.Open("auto")
	if err != nil || be.Name() != "cpu" {
		t.Fatalf("auto: %v, %v", be, err)
	}
	if !strings.Contains(logs.String(), "cuda: ") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("no warning naming cuda in the logs: %q", logs.String())
	}
}

// TestOpenRefusesBadQMV1Cols: a REDRAFTER_CUDA_QMV1_COLS that is not auto,
// 8, 4 or 2 makes Open fail, naming the variable, before the driver is
// loaded (so on any machine); a good one gets past that check.
func TestOpenRefusesBadQMV1Cols(t *testing.T) {
	t.Setenv("REDRAFTER_CUDA_QMV1_COLS", "16")
	b, err := Open()
	if err == nil {
		b.Close()
		t.Fatal("Open took REDRAFTER_CUDA_QMV1_COLS=16")
	}
	if !strings.Contains(err.Error(), "REDRAFTER_CUDA_QMV1_COLS") {
		t.Fatalf("the error does not name the variable: %v", err)
	}
	t.Setenv("REDRAFTER_CUDA_QMV1_COLS", "4")
	if b, err := Open(); err == nil {
		if b.qmv1Cols != 4 {
			t.Errorf("REDRAFTER_CUDA_QMV1_COLS=4 opened a backend with width %d", b.qmv1Cols)
		}
		b.Close()
	} else if strings.Contains(err.Error(), "REDRAFTER_CUDA_QMV1_COLS") {
		t.Fatalf("Open refused REDRAFTER_CUDA_QMV1_COLS=4: %v", err)
	}
}
