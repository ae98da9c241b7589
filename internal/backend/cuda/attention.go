package cuda

import (
	"fmt"
	"runtime"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Attention (attention.cu) cuts each query's visible keys into chunks of
// attnChunk, as Metal does. With enough (head, query) pairs to fill the GPU
// (prefill, large trees) attention_tree runs one block per pair, which
// walks the chunks; otherwise (decode, small trees over a cache of more than
// one chunk) attention_split runs one block per (head, query, chunk), and
// the last of a pair's blocks merges the chunks. Both give the same bits,
// so the choice, made here from the plan's static shapes (the cache's
// capacity, not the context, which is in a device buffer), never changes a
// result. Either is one launch.

// attentionMaxD is the largest head dimension attention.cu takes.
const attentionMaxD = 256

// attnChunk is ATT_CHUNK in attention.cu: the keys of one partial.
const attnChunk = 256

// attnSplitBelow is the number of (head, query) pairs under which the split
// kernel runs (when the cache spans more than one chunk); a variable so
// that tests can force either kernel.
var attnSplitBelow = 512

// attnScratchMax bounds the split kernel's scratch; larger shapes walk the
// chunks in one block instead.
const attnScratchMax = 32 << 20

// attnChunks is the number of chunks a query may need: it sees at most the
// whole cache. Chunks past a query's visible keys are empty on the device.
func attnChunks(c int) int { return max(ceilDiv(c, attnChunk), 1) }

// attnSplit says whether attention over these shapes takes the split kernel.
func attnSplit(n, h, d, c int) bool {
	p := attnChunks(c)
	return p > 1 && n*h < attnSplitBelow && attnScratchBytes(n, h, d, p) <= attnScratchMax
}

// attnScratchBytes: the split kernel's counts [n][h] i32, then its
// partials [n][h][p][d+2] f32.
func attnScratchBytes(n, h, d, p int) int { return 4*n*h + 4*n*h*p*(d+2) }

// attention encodes AttentionOp.
func (e *encoder) attention(op graph.AttentionOp) error {
	q, k := e.shape(0), e.shape(1)
	n, h, d, kvh, c, dt := q[0], q[1], q[2], k[0], k[1], e.dtype(1)
	if !attnSplit(n, h, d, c) {
		l, err := attentionLaunch(e.out, e.in[0], e.in[1], e.in[2], e.in[3], e.in[4], dt, n, h, kvh, d, c, op.Scale, op.Window, op.SoftCap)
		if err != nil {
			return err
		}
		e.add(l)
		return nil
	}
	// The scratch is the step's own (a plan's other attention steps, which
	// may one day run concurrently in a CUDA graph, have theirs), and lives
	// as long as the launch that uses it. Alloc zeroes it: the counts start
	// at zero, and each run leaves them zero.
	buf, err := e.b.Alloc(attnScratchBytes(n, h, d, attnChunks(c)))
	if err != nil {
		return err
	}
	scratch := buf.(*Buffer).ptr
	l, err := attentionSplitLaunch(e.out, e.in[0], e.in[1], e.in[2], e.in[3], e.in[4], scratch, dt, n, h, kvh, d, c, op.Scale, op.Window, op.SoftCap)
	if err != nil {
		e.b.Free(buf)
		return err
	}
	b := e.b
	runtime.AddCleanup(l, func(buf graph.Buffer) { b.freeScratch(buf) }, buf)
	e.add(l)
	return nil
}

// freeScratch frees a plan's scratch buffer once its launch is garbage,
// unless the backend was closed first (which released the context).
func (b *Backend) freeScratch(buf graph.Buffer) {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if !closed {
		b.Free(buf)
	}
}

func attnCheck(h, kvh, d int) error {
	if d > attentionMaxD {
		return fmt.Errorf("cuda: attention head dim %d > %d", d, attentionMaxD)
	}
	if kvh <= 0 || h%kvh != 0 {
		return fmt.Errorf("cuda: attention over %d query heads for %d KV heads", h, kvh)
	}
	return nil
}

// attentionLaunch: attention_tree, one block per (head, query); q [n, h, d],
// caches [kvh, c, d]; window is the sliding window (0: none).
func attentionLaunch(out, q, k, v, kvLen, end devptr, dt graph.DType, n, h, kvh, d, c int, scale float32, window int, softcap float32) (*launch, error) {
	if err := attnCheck(h, kvh, d); err != nil {
		return nil, err
	}
	return newLaunch("attention_tree_"+dt.String(), grid2(h, n), 128).
		ptr(out).ptr(q).ptr(k).ptr(v).ptr(kvLen).ptr(end).i32(n).i32(h).i32(kvh).i32(d).i32(c).f32(scale).i32(window).f32(softcap), nil
}

// attentionSplitLaunch: attention_split, one block per (head, query,
// chunk), over scratch of attnScratchBytes (zeroed before its first run).
func attentionSplitLaunch(out, q, k, v, kvLen, end, scratch devptr, dt graph.DType, n, h, kvh, d, c int, scale float32, window int, softcap float32) (*launch, error) {
	if err := attnCheck(h, kvh, d); err != nil {
		return nil, err
	}
	p := attnChunks(c)
	l := &launch{kernel: "attention_split_" + dt.String(), grid: [3]int{max(h, 1), max(n, 1), p}, block: [3]int{128, 1, 1}}
	return l.
		ptr(out).ptr(q).ptr(k).ptr(v).ptr(kvLen).ptr(end).ptr(scratch).ptr(scratch + devptr(4*n*h)).
		i32(n).i32(h).i32(kvh).i32(d).i32(c).i32(p).f32(scale).i32(window).f32(softcap), nil
}
