package metal

// Mirrors of internal/backend/metal/shaders/args.h. Every field is a 4-byte int32 or float32,
// in the header's order; TestArgsLayout compiles the header and compares
// sizes, offsets and constants.

const (
	matvecRows       = 4   // MATVEC_ROWS
	matvecSimdgroups = 2   // MATVEC_SIMDGROUPS
	matvecMaxM       = 8   // MATVEC_MAX_M
	matmulBM         = 64  // MATMUL_BM
	matmulBN         = 64  // MATMUL_BN
	matmulBK         = 32  // MATMUL_BK
	matmulThreads    = 128 // MATMUL_THREADS
	attnSimdgroups   = 4   // ATTN_SIMDGROUPS
	attnMaxHeadDim   = 256 // ATTN_MAX_HEAD_DIM
	attnChunk        = 256 // ATTN_CHUNK
	attnBlock        = 8   // ATTN_BLOCK
	rowThreads       = 256 // ROW_THREADS
	chainsThreads    = 64  // CHAINS_THREADS
	qmvRows          = 4   // QMV_ROWS
	qmvSimdgroups    = 2   // QMV_SIMDGROUPS
	qmvMaxM          = 8   // QMV_MAX_M
	qmvValues        = 16  // QMV_VALUES

	// The LINEAR_ bits of MatmulArgs.Fuse and QuantArgs.Fuse.
	linearNorm     = 1  // LINEAR_NORM
	linearBias     = 2  // LINEAR_BIAS
	linearSwiGLU   = 4  // LINEAR_SWIGLU
	linearResidual = 8  // LINEAR_RESIDUAL
	linearGeGLU    = 16 // LINEAR_GEGLU
)

// MatmulArgs: out[M,N] = x[M,K] · w[N,K]ᵀ; Vec4 = 1 when rows can be read
// 4 elements at a time (see vec4Aligned); Fuse (linear* bits) and Eps:
// what the matvec folds in (LinearOp).
type MatmulArgs struct {
	M, N, K, Vec4, Fuse int32
	Eps                 float32
}

// EmbedArgs: out[N,D] = table[ids[N]], table [V,D].
type EmbedArgs struct{ N, D, V int32 }

// RMSNormArgs: rows of length D.
type RMSNormArgs struct {
	M, D int32
	Eps  float32
}

// RoPEArgs: x [M,H,D], the first 2·P dims of each head rotated.
type RoPEArgs struct{ M, H, D, P int32 }

// AttentionArgs: q [N,H,D], k and v [KVH,C,D]; P chunks in the split
// kernels' scratch; Vec4 as in MatmulArgs; Window the sliding window (0:
// none); SoftCap the scores' soft-cap (0: none).
type AttentionArgs struct {
	N, H, KVH, D, C int32
	Scale           float32
	P, Vec4, Window int32
	SoftCap         float32
}

// KVArgs: cache [Row/D,C,D] (KV heads, positions, head dim); N rows of
// Row written or kept.
type KVArgs struct{ N, Row, C, D int32 }

// ElementwiseArgs: N values; binary ops broadcast NB values of b.
type ElementwiseArgs struct{ N, NB int32 }

// SoftCapArgs: N values capped at Cap (SoftCapOp).
type SoftCapArgs struct {
	N   int32
	Cap float32
}

// ConcatArgs: a [M,Da] and b [M,Db].
type ConcatArgs struct{ M, Da, Db int32 }

// RowArgs: x [M,V]; K for TopK and TakeAlong.
type RowArgs struct{ M, V, K int32 }

// GatherArgs: out[N,Row] = x[idx[N]], x [M,Row].
type GatherArgs struct{ N, M, Row int32 }

// DraftArgs: WarpLogSoftmax over x [Rows,V] keeping the top K (Masked
// elsewhere); BeamTop of K from Beams beams over lp [Rows,V].
type DraftArgs struct {
	Rows, Beams, V, K int32
	Masked            float32
}

// ChainsArgs: W beams of length L in N = 1+W·(L-1) tokens; Depth is
// BeamChains' draft.
type ChainsArgs struct{ N, W, L, Depth int32 }

// QuantArgs: affine-quantized w [N,K] in groups of G; M rows of x or ids.
// Fuse and Eps as in MatmulArgs (qmv).
type QuantArgs struct {
	M, N, K, G, Vec4, Fuse int32
	Eps                    float32
}

// RoPEKVArgs: qkv [M,(H+2·KVH)·D], the first 2·P dims of each query and key
// head rotated, caches [KVH,C,D].
type RoPEKVArgs struct{ M, H, KVH, D, P, C int32 }

// argStructs maps each args.h struct name to a value of its Go mirror, for
// the layout test.
var argStructs = map[string]any{
	"MatmulArgs":      MatmulArgs{},
	"EmbedArgs":       EmbedArgs{},
	"RMSNormArgs":     RMSNormArgs{},
	"RoPEArgs":        RoPEArgs{},
	"AttentionArgs":   AttentionArgs{},
	"KVArgs":          KVArgs{},
	"ElementwiseArgs": ElementwiseArgs{},
	"SoftCapArgs":     SoftCapArgs{},
	"ConcatArgs":      ConcatArgs{},
	"RowArgs":         RowArgs{},
	"GatherArgs":      GatherArgs{},
	"QuantArgs":       QuantArgs{},
	"DraftArgs":       DraftArgs{},
	"ChainsArgs":      ChainsArgs{},
	"RoPEKVArgs":      RoPEKVArgs{},
}

// argConstants maps each args.h #define to its Go mirror.
var argConstants = map[string]int{
	"MATVEC_ROWS":       matvecRows,
	"MATVEC_SIMDGROUPS": matvecSimdgroups,
	"MATVEC_MAX_M":      matvecMaxM,
	"MATMUL_BM":         matmulBM,
	"MATMUL_BN":         matmulBN,
	"MATMUL_BK":         matmulBK,
	"MATMUL_THREADS":    matmulThreads,
	"ATTN_SIMDGROUPS":   attnSimdgroups,
	"ATTN_MAX_HEAD_DIM": attnMaxHeadDim,
	"ATTN_CHUNK":        attnChunk,
	"ATTN_BLOCK":        attnBlock,
	"ROW_THREADS":       rowThreads,
	"CHAINS_THREADS":    chainsThreads,
	"QMV_ROWS":          qmvRows,
	"QMV_SIMDGROUPS":    qmvSimdgroups,
	"QMV_MAX_M":         qmvMaxM,
	"QMV_VALUES":        qmvValues,
	"LINEAR_NORM":       linearNorm,
	"LINEAR_BIAS":       linearBias,
	"LINEAR_SWIGLU":     linearSwiGLU,
	"LINEAR_RESIDUAL":   linearResidual,
	"LINEAR_GEGLU":      linearGeGLU,
}
