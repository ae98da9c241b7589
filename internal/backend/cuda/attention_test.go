package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// TestAttentionRowSameBitsDecodeAndTree: greedy ReDrafter reproduces greedy
// decoding only if a tree token's attention has the bits the same token
// gets decoded alone after its ancestors. For queries of a 6-token tree
// over a long cache (a chunk boundary between a query's ancestors), the
// row from the tree pass (N = 6) must equal the row from a decode pass
// (N = 1) over a cache holding the ancestors in order, bit for bit, on
// both kernels (split and walking the chunks).
func TestAttentionRowSameBitsDecodeAndTree(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(seed(t), 32))
	const h, kvh, past, cc = 4, 2, 1022, 1400
	// DFS pre-order: 0 is the root; 1 (with child 2) and 3 under 0... as ends:
	// query 5 sees new keys 0, 4, 5 (visible 1022, 1023 | 1024: a boundary).
	end := []int32{5, 3, 2, 3, 5, 5}
	n := len(end)
	b := graph.AsBytes
	// Head dims 64 and 40 take the 16-byte path (4 and 6 V rows a step),
	// 36 the general one.
	for _, c := range []struct {
		dt graph.DType
		d  int
	}{{graph.F32, 64}, {graph.F16, 64}, {graph.F16, 40}, {graph.F32, 36}} {
		dt, d := c.dt, c.d
		scale := float32(1 / math.Sqrt(float64(d)))
		kf, vf := opcases.RandF32(r, kvh*cc*d, 1), opcases.RandF32(r, kvh*cc*d, 1)
		q := opcases.RandF32(r, n*h*d, 1)
		data := func(x []float32) []byte {
			if dt == graph.F16 {
				return b(quant.F32sToF16(x))
			}
			return b(x)
		}
		// run returns the [n][h][d] result of one kernel.
		run := func(dv *emuDevice, q, kf, vf []float32, kvLen int, end []int32, split bool) []float32 {
			n := len(end)
			dv.bufs = dv.bufs[:0] // the emulator binds every allocation
			out := dv.alloc(make([]byte, 4*n*h*d))
			qp, kp, vp := dv.alloc(b(q)), dv.alloc(data(kf)), dv.alloc(data(vf))
			lp, ep := dv.alloc(b([]int32{int32(kvLen)})), dv.alloc(b(end))
			var l *launch
			var err error
			if split {
				scratch := dv.alloc(make([]byte, attnScratchBytes(n, h, d, attnChunks(cc))))
				l, err = attentionSplitLaunch(out, qp, kp, vp, lp, ep, scratch, dt, n, h, kvh, d, cc, scale, 0, 0)
			} else {
				l, err = attentionLaunch(out, qp, kp, vp, lp, ep, dt, n, h, kvh, d, cc, scale, 0, 0)
			}
			if err == nil {
				err = dv.run(l)
			}
			if err != nil {
				t.Fatal(err)
			}
			return dv.f32s(out)
		}
		dv := newEmuDevice(t, nil)
		tree := [2][]float32{run(dv, q, kf, vf, past, end, true), run(dv, q, kf, vf, past, end, false)}
		for _, i := range []int{3, 5} {
			// The decode cache: the prefix, then i's ancestors and i in order.
			k1, v1 := slices2(kf), slices2(vf)
			row := past
			for j := 0; j <= i; j++ {
				if int(end[j]) < i {
					continue
				}
				for g := 0; g < kvh; g++ {
					copy(k1[(g*cc+row)*d:][:d], kf[(g*cc+past+j)*d:][:d])
					copy(v1[(g*cc+row)*d:][:d], vf[(g*cc+past+j)*d:][:d])
				}
				row++
			}
			qi := q[i*h*d : (i+1)*h*d]
			for pi, split := range []bool{true, false} {
				dec := run(dv, qi, k1, v1, row-1, []int32{0}, split)
				for _, tr := range tree {
					for x := range dec {
						if got, want := math.Float32bits(tr[i*h*d+x]), math.Float32bits(dec[x]); got != want {
							t.Fatalf("%v d %d: query %d element %d: %v in the tree pass, %v decoded alone (split %v)",
								dt, d, i, x, tr[i*h*d+x], dec[x], []bool{true, false}[pi])
						}
					}
				}
			}
		}
		// The two kernels agree on every row of the tree.
		for x := range tree[0] {
			if math.Float32bits(tree[0][x]) != math.Float32bits(tree[1][x]) {
				t.Fatalf("%v d %d: element %d: split %v, walk %v", dt, d, x, tree[0][x], tree[1][x])
			}
		}
	}
}

func slices2(x []float32) []float32 { return append([]float32(nil), x...) }

// TestAttentionSplitChoice: the kernel is chosen from static shapes, so a
// decode row (N = 1) and the same row in a verification pass (N = 1 + W·L)
// get the same chunks (attnChunks depends on the cache's capacity only);
// decode over a cache longer than one chunk takes the split kernel, and
// prefill of many tokens walks the chunks. One launch either way.
func TestAttentionSplitChoice(t *testing.T) {
	const h, d = 32, 64
	for _, c := range []struct {
		n, cap int
		split  bool
	}{{1, 256, false}, {1, 257, true}, {1, 4096, true}, {6, 4096, true}, {21, 4096, false}, {512, 4096, false}} {
		if got := attnSplit(c.n, h, d, c.cap); got != c.split {
			t.Errorf("N %d over a cache of %d: split %v, want %v", c.n, c.cap, got, c.split)
		}
	}
}
