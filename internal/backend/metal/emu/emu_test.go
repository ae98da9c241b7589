package emu

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"
)

// The semantics tests: small kernels whose results depend on barriers and
// simdgroup collectives behaving as on the GPU, and kernels with bugs the
// dispatcher must report.
const semanticsSrc = `
#include <metal_stdlib>
using namespace metal;

struct N { int n; };

// Each thread reads what its neighbour wrote before the barrier.
template <typename T>
kernel void barrier_rotate(constant N &a [[buffer(0)]], device T *out [[buffer(1)]],
		threadgroup T *sh [[threadgroup(0)]], uint tid [[thread_index_in_threadgroup]],
		uint3 tg [[threadgroup_position_in_grid]]) {
	sh[tid] = T(tid) + T(1000 * tg.x);
	threadgroup_barrier(mem_flags::mem_threadgroup);
	out[tg.x * a.n + tid] = sh[(tid + 1) % a.n];
}

// Collectives over a threadgroup whose last simdgroup is partial.
template <typename T>
kernel void simd_ops(constant N &a [[buffer(0)]], device float *out [[buffer(1)]],
		uint tid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
	const float v = float(tid) * 0.5f;
	device float *o = out + tid * 8;
	o[0] = simd_sum(v);
	o[1] = simd_max(v);
	o[2] = simd_prefix_exclusive_sum(v);
	o[3] = simd_shuffle_down(v, ushort(3));
	o[4] = simd_shuffle_xor(v, ushort(5));
	o[5] = simd_broadcast(v, ushort(2));
	o[6] = simd_any(lane == 7u) ? 1.0f : 0.0f;
	o[7] = simd_all(lane < 40u) ? 1.0f : 0.0f;
}

// C[16x16] = A[16x8] · B[8x16], B read transposed from Bt[16x8].
template <typename T>
kernel void matrix_mul(constant N &a [[buffer(0)]], device const float *A [[buffer(1)]],
		device const float *Bt [[buffer(2)]], device float *C [[buffer(3)]],
		uint sg [[simdgroup_index_in_threadgroup]]) {
	const int i = int(sg) / 2, j = int(sg) % 2;
	simdgroup_float8x8 x, y, c = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
	simdgroup_load(x, A + i * 8 * 8, 8);
	simdgroup_load(y, Bt + j * 8 * 8, 8, ulong2(0), true);
	simdgroup_multiply_accumulate(c, x, y, c);
	simdgroup_store(c, C + i * 8 * 16 + j * 8, 16);
}

template <typename T>
kernel void bad_barrier(constant N &a [[buffer(0)]], device float *out [[buffer(1)]],
		uint tid [[thread_index_in_threadgroup]]) {
	if (tid < 16u) {
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
	out[tid] = 1.0f;
}

template <typename T>
kernel void bad_divergence(constant N &a [[buffer(0)]], device float *out [[buffer(1)]],
		uint lane [[thread_index_in_simdgroup]]) {
	out[lane] = lane < 16u ? simd_sum(1.0f) : simd_max(1.0f);
}

template <typename T>
kernel void bad_bounds(constant N &a [[buffer(0)]], device float *out [[buffer(1)]],
		uint tid [[thread_position_in_grid]]) {
	out[tid] = 1.0f; // the grid is larger than the buffer
}

template <typename T>
kernel void bad_load(constant N &a [[buffer(0)]], device float *out [[buffer(1)]],
		uint lane [[thread_index_in_simdgroup]]) {
	simdgroup_float8x8 x;
	simdgroup_load(x, out + lane, 8);
}

// Each thread takes a ticket from a counter in device memory (out[n]), as
// no correct kernel does: the tickets show the order threads ran in.
template <typename T>
kernel void ticket(constant N &a [[buffer(0)]], device uint *out [[buffer(1)]],
		uint tid [[thread_index_in_threadgroup]], uint3 tg [[threadgroup_position_in_grid]]) {
	const uint t = out[a.n];
	out[a.n] = t + 1u;
	out[tg.x * 64u + tid] = t;
}

// out = x*y + z, which a fused multiply-add computes with one rounding.
template <typename T>
kernel void mul_add(constant N &a [[buffer(0)]], device float *x [[buffer(1)]]) {
	x[3] = x[0] * x[1] + x[2];
}

instantiate_kernel("barrier_rotate_f32", barrier_rotate, float)
instantiate_kernel("ticket_f32", ticket, float)
instantiate_kernel("mul_add_f32", mul_add, float)
instantiate_kernel("simd_ops_f32", simd_ops, float)
instantiate_kernel("matrix_mul_f32", matrix_mul, float)
instantiate_kernel("bad_barrier_f32", bad_barrier, float)
instantiate_kernel("bad_divergence_f32", bad_divergence, float)
instantiate_kernel("bad_bounds_f32", bad_bounds, float)
instantiate_kernel("bad_load_f32", bad_load, float)
`

func semantics(t *testing.T) *Program {
	t.Helper()
	p, err := ForTest(t).Build("semantics.metal", semanticsSrc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func i32s(vs ...int) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func f32s(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func fromF32(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func TestBarrier(t *testing.T) {
	p := semantics(t)
	const n, groups = 100, 3
	d := &Dispatch{Request: core.Request{Kernel: "barrier_rotate_f32", Grid: [3]int{groups, 1, 1}, Group: [3]int{n, 1, 1},
		Buffers:     []core.Buffer{{Index: 0, Data: i32s(n)}, {Index: 1, Data: make([]byte, 4*n*groups)}},
		Threadgroup: map[int]int{0: 4 * 112}}}
	if err := p.Run(d); err != nil {
		t.Fatal(err)
	}
	out := f32s(d.Buffers[1].Data)
	for g := 0; g < groups; g++ {
		for i := 0; i < n; i++ {
			if want := float32((i+1)%n + 1000*g); out[g*n+i] != want {
				t.Fatalf("group %d thread %d read %v, want %v", g, i, out[g*n+i], want)
			}
		}
	}
}

func TestSimdgroupOps(t *testing.T) {
	p := semantics(t)
	const n = 48 // one full simdgroup and one of 16 lanes
	d := &Dispatch{Request: core.Request{Kernel: "simd_ops_f32", Grid: [3]int{1, 1, 1}, Group: [3]int{n, 1, 1},
		Buffers: []core.Buffer{{Index: 0, Data: i32s(n)}, {Index: 1, Data: make([]byte, 4*8*n)}}}}
	if err := p.Run(d); err != nil {
		t.Fatal(err)
	}
	out := f32s(d.Buffers[1].Data)
	for tid := 0; tid < n; tid++ {
		sg, lane := tid/32, tid%32
		lanes := min(32, n-32*sg)
		val := func(l int) float32 { return float32(32*sg+l) * 0.5 }
		var sum, prefix float32
		for l := 0; l < lanes; l++ {
			sum += val(l)
			if l < lane {
				prefix += val(l)
			}
		}
		from := func(src int) float32 {
			if src < 0 || src >= lanes {
				return val(lane)
			}
			return val(src)
		}
		want := []float32{sum, val(lanes - 1), prefix, from(lane + 3), from(lane ^ 5), val(2), 1, 1}
		for k, w := range want {
			if got := out[tid*8+k]; got != w {
				t.Errorf("thread %d op %d = %v, want %v", tid, k, got, w)
			}
		}
	}
}

func TestSimdgroupMatrix(t *testing.T) {
	p := semantics(t)
	a := make([]float32, 16*8)
	bt := make([]float32, 16*8)
	for i := range a {
		a[i] = float32(i%7) - 3
		bt[i] = float32(i%5) * 0.25
	}
	d := &Dispatch{Request: core.Request{Kernel: "matrix_mul_f32", Grid: [3]int{1, 1, 1}, Group: [3]int{128, 1, 1},
		Buffers: []core.Buffer{{Index: 0, Data: i32s(0)}, {Index: 1, Data: fromF32(a)}, {Index: 2, Data: fromF32(bt)}, {Index: 3, Data: make([]byte, 4*256)}}}}
	if err := p.Run(d); err != nil {
		t.Fatal(err)
	}
	c := f32s(d.Buffers[3].Data)
	for i := 0; i < 16; i++ {
		for j := 0; j < 16; j++ {
			want := float32(1)
			for k := 0; k < 8; k++ {
				want += a[i*8+k] * bt[j*8+k]
			}
			if c[i*16+j] != want {
				t.Fatalf("C[%d,%d] = %v, want %v", i, j, c[i*16+j], want)
			}
		}
	}
}

// TestReportsBugs checks that kernel bugs that would hang, corrupt memory or
// be undefined on the GPU are reported rather than computed.
func TestReportsBugs(t *testing.T) {
	p := semantics(t)
	for _, tc := range []struct {
		kernel string
		group  int
		out    int
		want   string
	}{
		{"bad_barrier_f32", 64, 64, "threadgroup_barrier"},
		{"bad_divergence_f32", 32, 32, "divergent"},
		{"bad_bounds_f32", 64, 63, "past the end of buffer(1)"},
		{"bad_load_f32", 32, 64, "simdgroup_load"},
	} {
		d := &Dispatch{Request: core.Request{Kernel: tc.kernel, Grid: [3]int{1, 1, 1}, Group: [3]int{tc.group, 1, 1},
			Buffers: []core.Buffer{{Index: 0, Data: i32s(0)}, {Index: 1, Data: make([]byte, 4*tc.out)}}}}
		err := p.Run(d)
		t.Logf("%s: %v", tc.kernel, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.kernel, err, tc.want)
		}
	}
}

// TestRefusesWhatMSLRefuses checks that kernels Apple's compiler refuses
// (for their address spaces, or for C++ that MSL does not have: double,
// the C and C++ libraries, variable-length arrays, recursion, function
// pointers, lambdas) fail to compile here too, and that the same kernels
// written right compile.
func TestRefusesWhatMSLRefuses(t *testing.T) {
	const head = "#include <metal_stdlib>\nusing namespace metal;\nstruct N { int n; };\n"
	for _, tc := range []struct {
		name, bad, good, want string
	}{
		{
			name: "device pointer to a thread parameter",
			bad: `inline float first(const float *x) { return x[0]; }
kernel void k(device const float *in [[buffer(1)]], device float *out [[buffer(2)]]) { out[0] = first(in); }`,
			good: `inline float first(device const float *x) { return x[0]; }
kernel void k(device const float *in [[buffer(1)]], device float *out [[buffer(2)]]) { out[0] = first(in); }`,
			want: "no matching function",
		},
		{
			name: "threadgroup pointer stored as a device pointer",
			bad: `kernel void k(device float *out [[buffer(1)]], threadgroup float *sh [[threadgroup(0)]]) {
	device float *p = sh; p[0] = out[0]; }`,
			good: `kernel void k(device float *out [[buffer(1)]], threadgroup float *sh [[threadgroup(0)]]) {
	threadgroup float *p = sh; p[0] = out[0]; }`,
			want: "cannot initialize",
		},
		{
			name: "buffer parameter without an address space",
			bad:  `kernel void k(float *out [[buffer(1)]]) { out[0] = 1.0f; }`,
			good: `kernel void k(device float *out [[buffer(1)]]) { out[0] = 1.0f; }`,
			want: "points to device or constant memory",
		},
		{
			name: "threadgroup parameter in device memory",
			bad:  `kernel void k(device float *out [[buffer(1)]], device float *sh [[threadgroup(0)]]) { sh[0] = out[0]; }`,
			good: `kernel void k(device float *out [[buffer(1)]], threadgroup float *sh [[threadgroup(0)]]) { sh[0] = out[0]; }`,
			want: "threadgroup parameters point to threadgroup memory",
		},
		{
			name: "simdgroup matrix loaded from thread memory",
			bad: `kernel void k(device float *out [[buffer(1)]]) {
	float local[64] = {}; simdgroup_float8x8 m; simdgroup_load(m, local, 8); simdgroup_store(m, out, 8); }`,
			good: `kernel void k(device float *out [[buffer(1)]]) {
	simdgroup_float8x8 m; simdgroup_load(m, out, 8); simdgroup_store(m, out, 8); }`,
			want: "no matching function",
		},
		{
			name: "double",
			bad:  `kernel void k(device float *out [[buffer(1)]]) { double x = out[0]; out[0] = float(x * 2.0); }`,
			good: `kernel void k(device float *out [[buffer(1)]]) { float x = out[0]; out[0] = x * 2.0f; }`,
			want: "poisoned",
		},
		{
			name: "C library function",
			bad:  `kernel void k(device float *out [[buffer(1)]]) { out[0] = expf(out[0]); }`,
			good: `kernel void k(device float *out [[buffer(1)]]) { out[0] = exp(out[0]); }`,
			want: "poisoned",
		},
		{
			name: "std namespace",
			bad:  `kernel void k(device float *out [[buffer(1)]]) { out[0] = std::fmax(out[0], 1.0f); }`,
			good: `kernel void k(device float *out [[buffer(1)]]) { out[0] = max(out[0], 1.0f); }`,
			want: "poisoned",
		},
		{
			name: "recursion",
			bad: `inline float fact(int n) { return n <= 1 ? 1.0f : float(n) * fact(n - 1); }
kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) { out[0] = fact(a.n); }`,
			good: `inline float fact(int n) { float f = 1.0f; for (int i = 2; i <= n; i++) { f *= float(i); } return f; }
kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) { out[0] = fact(a.n); }`,
			want: "fact: is recursive (fact → fact)",
		},
		{
			name: "mutual recursion",
			bad: `inline int odd(int n);
inline int even(int n) { return n == 0 ? 1 : odd(n - 1); }
inline int odd(int n) { return n == 0 ? 0 : even(n - 1); }
kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) { out[0] = float(even(a.n)); }`,
			good: `inline int even(int n) { return (n % 2) == 0 ? 1 : 0; }
kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) { out[0] = float(even(a.n)); }`,
			want: "is recursive (",
		},
		{
			name: "function pointer",
			bad: `inline float twice(float x) { return 2.0f * x; }
inline float apply(float (*f)(float), float x) { return f(x); }
kernel void k(device float *out [[buffer(1)]]) { out[0] = apply(twice, out[0]); }`,
			good: `inline float twice(float x) { return 2.0f * x; }
inline float apply(float x) { return twice(x); }
kernel void k(device float *out [[buffer(1)]]) { out[0] = apply(out[0]); }`,
			want: "k<float>: uses function twice as a value (a function pointer)",
		},
		{
			name: "call through a function pointer",
			bad: `inline float twice(float x) { return 2.0f * x; }
inline float half_of(float x) { return 0.5f * x; }
kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) {
	float (*f)(float) = a.n > 0 ? twice : half_of; out[0] = f(out[0]); }`,
			good: `inline float twice(float x) { return 2.0f * x; }
inline float half_of(float x) { return 0.5f * x; }
kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) {
	out[0] = a.n > 0 ? twice(out[0]) : half_of(out[0]); }`,
			want: "function pointer",
		},
		{
			name: "lambda",
			bad: `kernel void k(device float *out [[buffer(1)]]) {
	auto twice = [](float x) { return 2.0f * x; }; out[0] = twice(out[0]); }`,
			good: `inline float twice(float x) { return 2.0f * x; }
kernel void k(device float *out [[buffer(1)]]) { out[0] = twice(out[0]); }`,
			want: "k<float>: makes a lambda expression",
		},
		{
			name: "lambda never called",
			bad: `kernel void k(device float *out [[buffer(1)]]) {
	auto unused = [out]() { out[1] = 0.0f; }; (void)unused; out[0] = 1.0f; }`,
			good: `kernel void k(device float *out [[buffer(1)]]) { out[0] = 1.0f; }`,
			want: "lambda expression",
		},
		{
			name: "variable-length array",
			bad: `kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) {
	float v[a.n]; v[0] = 1.0f; out[0] = v[0]; }`,
			good: `kernel void k(constant N &a [[buffer(0)]], device float *out [[buffer(1)]]) {
	float v[4]; v[0] = 1.0f; out[0] = v[0]; }`,
			want: "variable length array",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := ForTest(t)
			// instantiate_kernel instantiates a template.
			wrap := func(src string) string {
				src = strings.Replace(src, "kernel void k(", "template <typename T>\nkernel void k(", 1)
				return head + src + "\ninstantiate_kernel(\"k_f32\", k, float)\n"
			}
			if _, err := b.Build("good.metal", wrap(tc.good)); err != nil {
				t.Fatalf("the correct kernel does not compile: %v", err)
			}
			_, err := b.Build("bad.metal", wrap(tc.bad))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestOrders checks that each thread order runs threads and threadgroups
// as documented, and that a dispatch whose results depend on the order is
// an error under the default orders.
func TestOrders(t *testing.T) {
	p := semantics(t)
	const groups, n = 2, 64
	run := func(orders []core.Order) ([]uint32, error) {
		out := make([]byte, 4*(groups*n+1))
		d := &Dispatch{Request: core.Request{Kernel: "ticket_f32", Grid: [3]int{groups, 1, 1}, Group: [3]int{n, 1, 1},
			Buffers: []core.Buffer{{Index: 0, Data: i32s(groups * n)}, {Index: 1, Data: out}}, Orders: orders}}
		err := p.Run(d)
		tickets := make([]uint32, groups*n)
		for i := range tickets {
			tickets[i] = binary.LittleEndian.Uint32(d.Buffers[1].Data[4*i:])
		}
		return tickets, err
	}
	fwd, err := run([]core.Order{core.Forward})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := run([]core.Order{core.Reverse})
	if err != nil {
		t.Fatal(err)
	}
	rnd, err := run([]core.Order{core.Random(7)})
	if err != nil {
		t.Fatal(err)
	}
	rnd2, err := run([]core.Order{core.Random(7)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range fwd {
		if fwd[i] != uint32(i) {
			t.Fatalf("forward: thread %d ran %d-th, want in index order: %v", i, fwd[i], fwd)
		}
		if rev[i] != uint32(groups*n-1-i) {
			t.Fatalf("reverse: thread %d ran %d-th, want in reverse index order: %v", i, rev[i], rev)
		}
	}
	if !slices.Equal(rnd, rnd2) {
		t.Errorf("the same seed gave two orders: %v, %v", rnd, rnd2)
	}
	seen := make([]bool, len(rnd))
	for _, v := range rnd {
		seen[v] = true
	}
	if slices.Equal(rnd, fwd) || slices.Equal(rnd, rev) || slices.Contains(seen, false) {
		t.Errorf("random: tickets %v, want a permutation other than forward and reverse", rnd)
	}
	_, err = run(nil)
	t.Logf("default orders: %v", err)
	if err == nil || !strings.Contains(err.Error(), "results differ between thread orders") {
		t.Errorf("an order-dependent dispatch under the default orders: error %v, want one saying the results differ", err)
	}
}

// TestContract checks that the two contraction modes compile x*y+z as two
// roundings and as one.
func TestContract(t *testing.T) {
	p := semantics(t)
	// x*y = 1 + 2^-11 + 2^-24 exactly: rounded to float it loses the 2^-24,
	// which z then cancels to 0; fused, the 2^-24 survives.
	x := float32(1 + 1.0/4096)
	in := []float32{x, x, -(1 + 1.0/2048), 42}
	for _, tc := range []struct {
		c    Contract
		want float32
	}{{ContractOff, 0}, {ContractFast, 1.0 / (1 << 24)}} {
		d := &Dispatch{Request: core.Request{Kernel: "mul_add_f32", Grid: [3]int{1, 1, 1}, Group: [3]int{1, 1, 1},
			Buffers: []core.Buffer{{Index: 0, Data: i32s(0)}, {Index: 1, Data: fromF32(in)}}}, Contract: tc.c}
		if err := p.Run(d); err != nil {
			t.Fatal(err)
		}
		if got := f32s(d.Buffers[1].Data)[3]; got != tc.want {
			t.Errorf("%v: x*y+z = %g, want %g", tc.c, got, tc.want)
		}
	}
}
