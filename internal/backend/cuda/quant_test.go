package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// TestQMatVecKSplit: at the model's width, k = 2048, every thread of a
// qmatvec block has chunks of 16 bytes to read, and as many as the others
// (the kernel's previous split left half of the block idle at 4 bits),
// at 4 and 8 bits, for the group sizes the converter writes: a chunk of
// 32 or 16 codes lies in one group of 32 or more. qmvKThreads is checked
// against quant.cu's QMV_KTHREADS, and the block's 128 threads against the
// launch.
func TestQMatVecKSplit(t *testing.T) {
	src, err := shaders.Source("quant.cu")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("#define QMV_KTHREADS %d ", qmvKThreads); !strings.Contains(src, want) {
		t.Fatalf("quant.cu does not define QMV_KTHREADS as qmvKThreads (%d)", qmvKThreads)
	}
	if want := fmt.Sprintf("#define QMV_COLS %d ", matvec8Cols); !strings.Contains(src, want) {
		t.Fatalf("quant.cu does not define QMV_COLS as matvec8Cols (%d)", matvec8Cols)
	}
	if want := fmt.Sprintf("#define QMV_SET_COLS %d ", qmvSetCols); !strings.Contains(src, want) {
		t.Fatalf("quant.cu does not define QMV_SET_COLS as qmvSetCols (%d)", qmvSetCols)
	}
	if want := fmt.Sprintf("#define QMV1_SET_COLS %d ", qmv1SetCols); !strings.Contains(src, want) {
		t.Fatalf("quant.cu does not define QMV1_SET_COLS as qmv1SetCols (%d)", qmv1SetCols)
	}
	if qmvBlockCols(4) != matvec8Cols || qmvBlockCols(1) != 2*qmv1SetCols {
		t.Fatalf("blocks of %d columns (4 rows) and %d (1 row), want %d and %d", qmvBlockCols(4), qmvBlockCols(1), matvec8Cols, 2*qmv1SetCols)
	}
	// Decoding's launches (one row) have blocks of 16 columns, 8 with
	// SwiGLU; verification's (4 rows) 8 and 4.
	for _, c := range []struct{ m, flags, n, blocks int }{
		{1, linSwiGLU | linNorm, 5632, 5632 / qmv1SetCols}, {4, linSwiGLU | linNorm, 5632, 5632 / qmvSetCols},
		{1, linNorm, 2560, 2560 / (2 * qmv1SetCols)}, {4, linResidual, 2048, 2048 / matvec8Cols},
	} {
		if l := qlinearLaunch(0, 0, 0, 0, 0, 0, 0, 0, 4, graph.F16, c.flags, c.m, 2048, c.n, 64, 1e-5); l.grid[0] != c.blocks {
			t.Fatalf("a qlinear launch (m = %d, flags %d) over %d columns has %d blocks, want %d", c.m, c.flags, c.n, l.grid[0], c.blocks)
		}
	}
	for _, m := range []int{1, 4} {
		if l := qmatvecLaunch(0, 0, 0, 0, 0, 4, graph.F16, m, 2048, 512, 64); l.grid[0] != 512/qmvBlockCols(m) {
			t.Fatalf("a qmatvec launch (m = %d) over 512 columns has %d blocks, want %d", m, l.grid[0], 512/qmvBlockCols(m))
		}
	}
	l := qmatvecLaunch(0, 0, 0, 0, 0, 4, graph.F16, 1, 2048, 5632, 64)
	threads := l.block[0]
	if threads != 2*qmvKThreads {
		t.Fatalf("a block of %d threads is not two sets of %d threads", threads, qmvKThreads)
	}
	const k = 2048
	for _, bits := range []int{4, 8} {
		codes := 16 * 8 / bits // per 16-byte chunk
		for _, gs := range []int{32, 64, 128} {
			if gs%codes != 0 {
				t.Errorf("%d bits, groups of %d: a chunk of %d codes spans groups", bits, gs, codes)
			}
			chunks := k / codes
			if chunks < qmvKThreads || chunks%qmvKThreads != 0 {
				t.Errorf("%d bits, groups of %d, k = %d: %d chunks a row over %d threads leave some idle", bits, gs, k, chunks, qmvKThreads)
			} else {
				t.Logf("%d bits, groups of %d, k = %d: %d chunks a row, %d a thread", bits, gs, k, chunks, chunks/qmvKThreads)
			}
		}
	}
}

// TestQMatVecRowsSameBitsAnyM: a row of x gets the same bits alone (m = 1,
// qmatvec1_*, and with narrower sets qmatvec1_c4_* and qmatvec1_c2_*), 4
// rows at a time, and in the pass of 1 to 3 rows that ends m (qmatvec_*):
// greedy ReDrafter's verification equals decoding only so.
// Threads have 1 to 3 chunks of a row (k of 4224 and 2048 codes), so the
// sums over chunks are compared too.
func TestQMatVecRowsSameBitsAnyM(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	d := newEmuDevice(t, nil)
	b, zeros := graph.AsBytes, func(n int) []byte { return make([]byte, 4*n) }
	for _, c := range []struct{ bits, gs, m, k, n int }{{4, 32, 7, 4224, 11}, {8, 64, 6, 2048, 9}, {4, 128, 5, 256, 3}} {
		d.bufs = d.bufs[:0] // each case's buffers only
		x := opcases.RandF32(r, c.m*c.k, 1)
		words := make([]uint32, c.n*c.k*c.bits/32)
		for i := range words {
			words[i] = r.Uint32()
		}
		w := d.alloc(b(words))
		scales := d.alloc(b(opcases.ScaledWeights(r, graph.BF16, c.n*c.k/c.gs, 0.1)))
		biases := d.alloc(b(opcases.ScaledWeights(r, graph.BF16, c.n*c.k/c.gs, 0.5)))
		all := d.alloc(zeros(c.m * c.n))
		if err := d.run(qmatvecLaunch(all, d.alloc(b(x)), w, scales, biases, c.bits, graph.BF16, c.m, c.k, c.n, c.gs)); err != nil {
			t.Fatal(err)
		}
		together := d.f32s(all)
		shared := len(d.bufs)
		for row := 0; row < c.m; row++ {
			d.bufs = d.bufs[:shared] // the emulator takes 30 buffers a launch
			for _, sc := range qmv1Widths {
				one := d.alloc(zeros(c.n))
				l := qmatvecColsLaunch(one, d.alloc(b(x[row*c.k:(row+1)*c.k])), w, scales, biases, c.bits, graph.BF16, 1, c.k, c.n, c.gs, sc)
				if !strings.HasPrefix(l.kernel, "qmatvec1_") {
					t.Fatalf("m = 1 launches %s, not qmatvec1_*", l.kernel)
				}
				if err := d.run(l); err != nil {
					t.Fatal(err)
				}
				alone := d.f32s(one)
				for j := range alone {
					if got, want := together[row*c.n+j], alone[j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%d bits g%d m=%d: row %d column %d is %v among %d rows, %v alone (%s)", c.bits, c.gs, c.m, row, j, got, c.m, want, l.kernel)
					}
				}
			}
		}
	}
}

// TestQLinearRowsSameBitsAnyM: qmatvec's property with the folds: a row
// of a fused quantized product has the same bits alone (qlinear1_*, with
// sets of 8, 4 and 2 columns, x 4
// bytes off 16-byte alignment: the float-at-a-time path) as among m rows
// (qlinear_*, 4 at a time, then the tail), with the norm and every
// epilogue, at 4 and 8 bits.
func TestQLinearRowsSameBitsAnyM(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	d := newEmuDevice(t, nil)
	b, zeros := graph.AsBytes, func(n int) []byte { return make([]byte, 4*n) }
	const eps = 1e-5
	for _, c := range []struct{ bits, gs, m, k, n, flags int }{
		{4, 32, 7, 4224, 11, linNorm | linBias | linSwiGLU},
		{8, 64, 6, 2048, 9, linNorm | linSwiGLU | linResidual},
		{4, 128, 5, 256, 10, linResidual | linBias},
		{8, 32, 5, 384, 3, linNorm},
	} {
		d.bufs = d.bufs[:0] // each case's buffers only
		rows := c.n
		if c.flags&linSwiGLU != 0 {
			rows = 2 * c.n
		}
		q := opcases.RandQuant(r, rows, c.k, c.bits, c.gs, graph.BF16)
		codes, scales, biases := q.Parts()
		w, sp, bp := d.alloc(b(codes)), d.alloc(b(scales)), d.alloc(b(biases))
		x, res := b(opcases.RandF32(r, c.m*c.k, 2)), b(opcases.RandF32(r, c.m*c.n, 4))
		gain, bias := d.alloc(b(opcases.RandF32(r, c.k, 1))), d.alloc(b(opcases.RandF32(r, rows, 1)))
		run := func(xp, rp devptr, m, sc int) ([]float32, string) {
			out := d.alloc(zeros(m * c.n))
			l := qlinearColsLaunch(out, xp, gain, w, sp, bp, bias, rp, c.bits, graph.BF16, c.flags, m, c.k, c.n, c.gs, eps, sc)
			if err := d.run(l); err != nil {
				t.Fatal(err)
			}
			return d.f32s(out), l.kernel
		}
		all, kAll := run(d.alloc(x), d.alloc(res), c.m, qmvSetCols)
		shared := len(d.bufs)
		for i := range c.m * len(qmv1Widths) {
			row, sc := i/len(qmv1Widths), qmv1Widths[i%len(qmv1Widths)]
			d.bufs = d.bufs[:shared] // the emulator takes 30 buffers a launch
			xp := d.alloc(append(make([]byte, 4), x[4*row*c.k:4*(row+1)*c.k]...)) + 4
			alone, kOne := run(xp, d.alloc(res[4*row*c.n:4*(row+1)*c.n]), 1, sc)
			if !strings.HasPrefix(kOne, "qlinear1_") || !strings.HasPrefix(kAll, "qlinear_") {
				t.Fatalf("launched %s for one row and %s for %d", kOne, kAll, c.m)
			}
			for j := range alone {
				if got, want := all[row*c.n+j], alone[j]; math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%d bits g%d flags %d m=%d: row %d column %d is %v among %d rows (%s), %v alone (%s)",
						c.bits, c.gs, c.flags, c.m, row, j, got, c.m, kAll, want, kOne)
				}
			}
		}
	}
}

// TestQMV1Cols: the one-row products' set width. Auto gives the TinyLlama
// shape's decoding products on an H100's 132 SMs at least 2 blocks an SM
// each with the widest sets that do (Q·K·V 4, gate·up 8, O and down 2);
// a forced width applies to every launch; without an SM count the widest;
// the launches name the kernel of their width and have its grid; and the
// switch's values parse, a wrong one an error.
func TestQMV1Cols(t *testing.T) {
	for _, c := range []struct {
		force, sms, n int
		glu           bool
		want          int
	}{
		{0, 132, 2560, false, 4}, {0, 132, 5632, true, 8}, {0, 132, 2048, false, 2}, {0, 132, 32000, false, 8},
		{0, 16, 2048, false, 8}, {0, 0, 2048, false, 8}, {0, 132, 9, false, 2},
		{8, 132, 2048, false, 8}, {4, 132, 5632, true, 4}, {2, 0, 32000, false, 2},
	} {
		if got := qmv1Cols(c.force, c.sms, c.n, c.glu); got != c.want {
			t.Errorf("qmv1Cols(force %d, %d SMs, n %d, glu %v) = %d, want %d", c.force, c.sms, c.n, c.glu, got, c.want)
		}
	}
	for _, sc := range qmv1Widths {
		l := qmatvecColsLaunch(0, 0, 0, 0, 0, 4, graph.F16, 1, 2048, 2048, 64, sc)
		if want := "qmatvec1" + qmv1Suffix(sc) + "_4_f16"; l.kernel != want || l.grid[0] != 2048/(2*sc) {
			t.Errorf("width %d: %s with %d blocks, want %s with %d", sc, l.kernel, l.grid[0], want, 2048/(2*sc))
		}
		l = qlinearColsLaunch(0, 0, 0, 0, 0, 0, 0, 0, 8, graph.BF16, linNorm|linSwiGLU, 1, 2048, 5632, 64, 1e-5, sc)
		if want := "qlinear1" + qmv1Suffix(sc) + "_norm_8_bf16"; l.kernel != want || l.grid[0] != 5632/sc {
			t.Errorf("width %d: %s with %d blocks, want %s with %d", sc, l.kernel, l.grid[0], want, 5632/sc)
		}
		// More rows keep the 4-row kernels' width whatever is asked.
		if l := qmatvecColsLaunch(0, 0, 0, 0, 0, 4, graph.F16, 3, 2048, 2048, 64, sc); l.kernel != "qmatvec_4_f16" || l.grid[0] != 2048/(2*qmvSetCols) {
			t.Errorf("3 rows, width %d asked: %s with %d blocks", sc, l.kernel, l.grid[0])
		}
	}
	for s, want := range map[string]int{"": 8, "auto": 0, "8": 8, "4": 4, "2": 2} {
		if got, err := parseQMV1Cols(s); err != nil || got != want {
			t.Errorf("parseQMV1Cols(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"16", "1", "3", "off", " 4"} {
		if _, err := parseQMV1Cols(s); err == nil {
			t.Errorf("parseQMV1Cols(%q) took it", s)
		}
	}
}
