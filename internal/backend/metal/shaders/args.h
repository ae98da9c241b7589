// args.h is the host/kernel contract: the constants and argument structs of
// every kernel in this folder. internal/backend/metal/args.go mirrors it field for field, and
// a test compiles this file and compares sizes, offsets and constants.
//
// Rules: fields are 4-byte int, uint or float only (no padding anywhere);
// the struct is always buffer(0) of its kernel, set with setBytes.
#pragma once

// matvec.metal: outputs per simdgroup, simdgroups per threadgroup, and the
// most rows of x per threadgroup (variants take 1, 4 or MATVEC_MAX_M).
#define MATVEC_ROWS 4
#define MATVEC_SIMDGROUPS 2
#define MATVEC_MAX_M 8

// matmul.metal: tile of the output per threadgroup and K step; 4 simdgroups
// of 32x32 each.
#define MATMUL_BM 64
#define MATMUL_BN 64
#define MATMUL_BK 32
#define MATMUL_THREADS 128

// attention.metal: simdgroups per threadgroup, the largest head dim, visible
// keys per chunk (one threadgroup's share; fixed, so that the sums' order
// depends on the visible length alone) and keys per simdgroup step.
#define ATTN_SIMDGROUPS 4
#define ATTN_MAX_HEAD_DIM 256
#define ATTN_CHUNK 256
#define ATTN_BLOCK 8

// Threads per threadgroup of the row reductions (norm, reduce).
#define ROW_THREADS 256

// chains.metal: threads of chains_accept's one threadgroup.
#define CHAINS_THREADS 64

// quant.metal qmv: outputs per simdgroup, simdgroups per threadgroup, rows
// of x per threadgroup, and codes per lane per step.
#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
#define QMV_MAX_M 8
#define QMV_VALUES 16

// What a matvec (matvec.metal, quant.metal's qmv) folds around its product
// (graph.LinearOp), as bits of the args' fuse field: x RMS-normalised with
// a gain first (eps), a bias added, SwiGLU or GeGLU (one of the two) over
// the weight's gate and up halves (N is then the output columns, the
// weight has 2N rows), a residual added last. 0 is the plain product.
#define LINEAR_NORM 1
#define LINEAR_BIAS 2
#define LINEAR_SWIGLU 4
#define LINEAR_RESIDUAL 8
#define LINEAR_GEGLU 16

// out[M,N] = x[M,K] · w[N,K]ᵀ (matvec and matmul). vec4 is 1 when rows of
// x and w (and the norm's gain) may be read 4 elements at a time: K is a
// multiple of 4 and the buffers are aligned to 4 elements (the host checks
// the addresses). fuse and eps: the LINEAR_ bits (matvec only).
struct MatmulArgs {
	int M;
	int N;
	int K;
	int vec4;
	int fuse;
	float eps;
};

// out[N,D] = table[ids[N]], table [V,D].
struct EmbedArgs {
	int N;
	int D;
	int V;
};

// out[M,D] = x / sqrt(mean(x²) + eps) * w.
struct RMSNormArgs {
	int M;
	int D;
	float eps;
};

// x [M,H,D], the first 2·P dims of each head rotated.
struct RoPEArgs {
	int M;
	int H;
	int D;
	int P;
};

// q [N,H,D], k and v [KVH,C,D]; kvLen comes from a buffer. P is the
// number of chunks of the split kernels' scratch; vec4 is 1 when rows of q,
// k and v may be read 4 elements at a time (D a multiple of 4, aligned).
struct AttentionArgs {
	int N;
	int H;
	int KVH;
	int D;
	int C;
	float scale;
	int P;
	int vec4;
	int window; // sliding window in positions; 0: none
	float softcap; // scores become softcap·tanh(score/softcap); 0: none
};

// cache [C,row]; N rows written (KVWrite) or kept (KVCompact).
struct KVArgs {
	int N;
	int row;
	int C;
	int D;
};

// Elementwise over n values; b of binary ops has nb values, broadcast.
struct ElementwiseArgs {
	int n;
	int nb;
};

// n values, each becoming cap·tanh(x/cap) (SoftCap).
struct SoftCapArgs {
	int n;
	float cap;
};

// Concat of a [M,Da] and b [M,Db].
struct ConcatArgs {
	int M;
	int Da;
	int Db;
};

// Row ops over x [M,V]: LogSoftmax, Argmax, TopK (K), TakeAlong (idx [M,K]).
struct RowArgs {
	int M;
	int V;
	int K;
};

// The beam search's reductions (reduce.metal): WarpLogSoftmax over x
// [rows,V] keeping the top K, masked to masked; BeamTop of K beams from
// `beams` beams over lp [rows,V].
struct DraftArgs {
	int rows;
	int beams;
	int V;
	int K;
	float masked;
};

// The chains layout of W beams of length L in N = 1+W·(L-1) tokens
// (chains.metal); depth is BeamChains' draft.
struct ChainsArgs {
	int N;
	int W;
	int L;
	int depth;
};

// out[n,row] = x[idx[n]], x [M,row] 4-byte elements.
struct GatherArgs {
	int n;
	int M;
	int row;
};

// Affine-quantized weights [N,K] in groups of G (quant.metal): out[M,N] =
// x[M,K]·wᵀ (qmv, qmm); out[M,K] = w[ids[M]] (embed); out[N,K] = w (dequant).
// vec4 (qmm): rows of x may be read 4 floats at a time. fuse and eps: the
// LINEAR_ bits (qmv only).
struct QuantArgs {
	int M;
	int N;
	int K;
	int G;
	int vec4;
	int fuse;
	float eps;
};

// RoPEKVWrite (kv.metal): qkv [M,(H+2·KVH)·D] rows; the first 2·P dims of
// each query and key head rotated; keys and values written at rows kvLen..
// of the caches [KVH,C,D].
struct RoPEKVArgs {
	int M;
	int H;
	int KVH;
	int D;
	int P;
	int C;
};
