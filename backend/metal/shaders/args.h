// args.h is the host/kernel contract: the constants and argument structs of
// every kernel in this folder. backend/metal/args.go mirrors it field for field, and
// a test compiles this file and compares sizes, offsets and constants.
//
// Rules: fields are 4-byte int, uint or float only (no padding anywhere);
// the struct is always buffer(0) of its kernel, set with setBytes.
#pragma once

// matvec.metal: outputs per simdgroup, simdgroups per threadgroup, and rows
// of x per threadgroup.
#define MATVEC_ROWS 4
#define MATVEC_SIMDGROUPS 2
#define MATVEC_MAX_M 8

// matmul.metal: tile of the output per threadgroup and K step; 4 simdgroups
// of 16x16 each.
#define MATMUL_BM 32
#define MATMUL_BN 32
#define MATMUL_BK 16
#define MATMUL_THREADS 128

// attention.metal: simdgroups per (query, head) and the largest head dim.
#define ATTN_SIMDGROUPS 4
#define ATTN_MAX_HEAD_DIM 256

// Threads per threadgroup of the row reductions (norm, reduce).
#define ROW_THREADS 256

// quant.metal qmv: outputs per simdgroup, simdgroups per threadgroup, rows
// of x per threadgroup, and codes per lane per step.
#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
#define QMV_MAX_M 8
#define QMV_VALUES 16

// out[M,N] = x[M,K] · w[N,K]ᵀ (matvec and matmul).
struct MatmulArgs {
	int M;
	int N;
	int K;
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

// q [N,H,D], k and v [C,KVH,D]; kvLen comes from a buffer.
struct AttentionArgs {
	int N;
	int H;
	int KVH;
	int D;
	int C;
	float scale;
};

// cache [C,row]; N rows written (KVWrite) or kept (KVCompact).
struct KVArgs {
	int N;
	int row;
	int C;
};

// Elementwise over n values; b of binary ops has nb values, broadcast.
struct ElementwiseArgs {
	int n;
	int nb;
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

// out[n,row] = x[idx[n]], x [M,row] 4-byte elements.
struct GatherArgs {
	int n;
	int M;
	int row;
};

// Affine-quantized weights [N,K] in groups of G (quant.metal): out[M,N] =
// x[M,K]·wᵀ (qmv, qmm); out[M,K] = w[ids[M]] (embed); out[N,K] = w (dequant).
struct QuantArgs {
	int M;
	int N;
	int K;
	int G;
};
