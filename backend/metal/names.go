package metal

import (
	"fmt"
	"strings"

	"github.com/seed9b8f47b1/redrafter/graph"
)

// kernelFamilies lists every kernel the host can ask for: a family (the
// .metal file), a variant, and the dtypes it is instantiated for. Kernel
// names are "<family>_<variant>_<dtype>"; kernelName builds them and refuses
// anything not listed here, so this table is the host half of the contract
// that TestKernelNames checks against the library.
var kernelFamilies = []struct {
	family, variant string
	dtypes          []graph.DType
}{
	{"matvec", "nt", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"matmul", "nt", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"embed", "rows", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"norm", "rms", []graph.DType{graph.F32}},
	{"rope", "neox", []graph.DType{graph.F32}},
	{"rope", "adjacent", []graph.DType{graph.F32}},
	// attention and kv: by the dtype of the cache.
	{"attention", "tree", []graph.DType{graph.F32, graph.F16}},
	{"kv", "write", []graph.DType{graph.F32, graph.F16}},
	{"kv", "compact", []graph.DType{graph.F32, graph.F16}},
	{"elementwise", "silu", []graph.DType{graph.F32}},
	{"elementwise", "swiglu", []graph.DType{graph.F32}},
	{"elementwise", "add", []graph.DType{graph.F32}},
	{"elementwise", "mul", []graph.DType{graph.F32}},
	{"elementwise", "concat", []graph.DType{graph.F32}},
	{"reduce", "logsoftmax", []graph.DType{graph.F32}},
	{"reduce", "argmax", []graph.DType{graph.F32}},
	{"reduce", "topk", []graph.DType{graph.F32}},
	{"reduce", "warp", []graph.DType{graph.F32}},
	{"reduce", "beamtop", []graph.DType{graph.F32}},
	{"gather", "rows", []graph.DType{graph.F32, graph.I32}},
	{"gather", "take", []graph.DType{graph.F32}},
	{"drafter", "rnn", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	// quant: <variant><bits>, by the dtype of the scales and biases.
	{"quant", "qmv4", scaleDTypes}, {"quant", "qmv8", scaleDTypes},
	{"quant", "qmm4", scaleDTypes}, {"quant", "qmm8", scaleDTypes},
	{"quant", "embed4", scaleDTypes}, {"quant", "embed8", scaleDTypes},
	{"quant", "dequant4", scaleDTypes}, {"quant", "dequant8", scaleDTypes},
}

// hasKernel reports whether the host has a kernel for family, variant and dt.
func hasKernel(family, variant string, dt graph.DType) bool {
	for _, f := range kernelFamilies {
		if f.family == family && f.variant == variant {
			for _, d := range f.dtypes {
				if d == dt {
					return true
				}
			}
		}
	}
	return false
}

// kernelName returns "<family>_<variant>_<dtype>". Asking for a kernel that
// kernelFamilies does not list is a programmer error.
func kernelName(family, variant string, dt graph.DType) string {
	if !hasKernel(family, variant, dt) {
		panic(fmt.Sprintf("metal: no kernel %s_%s for %v", family, variant, dt))
	}
	return family + "_" + variant + "_" + dt.String()
}

// KernelNames lists every kernel name the host can build, in table order.
func KernelNames() []string {
	var names []string
	for _, f := range kernelFamilies {
		for _, d := range f.dtypes {
			names = append(names, kernelName(f.family, f.variant, d))
		}
	}
	return names
}

// kernelFamily is the family (and .metal file stem) of a kernel name.
func kernelFamily(name string) string {
	i := strings.IndexByte(name, '_')
	if i < 0 {
		return name
	}
	return name[:i]
}
