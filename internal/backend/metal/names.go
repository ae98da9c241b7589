package metal

import (
	"fmt"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// kernelFamilies lists every kernel the host can ask for: a family (the
// .metal file), a variant, and the dtypes it is instantiated for. Kernel
// names are "<family>_<variant>_<dtype>"; kernelName builds them and refuses
// anything not listed here, so this table is the host half of the contract
// that TestKernelNames checks against the library.
var kernelFamilies = append([]kernelEntry{
	// matvec: nt<rows of x per threadgroup> (matvecMs).
	{"matvec", "nt1", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"matvec", "nt4", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"matvec", "nt8", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"matmul", "nt", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"embed", "rows", []graph.DType{graph.F32, graph.F16, graph.BF16}},
	{"norm", "rms", []graph.DType{graph.F32}},
	{"rope", "neox", []graph.DType{graph.F32}},
	{"rope", "adjacent", []graph.DType{graph.F32}},
	// attention and kv: by the dtype of the cache.
	{"attention", "tree", []graph.DType{graph.F32, graph.F16}},
	{"attention", "split", []graph.DType{graph.F32, graph.F16}},
	{"attention", "reduce", []graph.DType{graph.F32}}, // by the partials' type
	{"kv", "write", []graph.DType{graph.F32, graph.F16}},
	{"kv", "compact", []graph.DType{graph.F32, graph.F16}},
	{"kv", "ropeneox", []graph.DType{graph.F32, graph.F16}}, // RoPEKVWrite
	{"kv", "ropeadjacent", []graph.DType{graph.F32, graph.F16}},
	{"elementwise", "silu", []graph.DType{graph.F32}},
	{"elementwise", "swiglu", []graph.DType{graph.F32}},
	{"elementwise", "geglu", []graph.DType{graph.F32}},
	{"elementwise", "softcap", []graph.DType{graph.F32}},
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
	{"chains", "beam", []graph.DType{graph.I32}},
	{"chains", "accept", []graph.DType{graph.I32}},
	// quant: <variant><bits>, by the dtype of the scales and biases.
	{"quant", "embed4", scaleDTypes}, {"quant", "embed8", scaleDTypes},
	{"quant", "dequant4", scaleDTypes}, {"quant", "dequant8", scaleDTypes},
}, qmvEntries()...)

// kernelEntry is one row of kernelFamilies.
type kernelEntry struct {
	family, variant string
	dtypes          []graph.DType
}

// qmvEntries are quant.metal's matvecs and matmuls: qmv<bits>g<group
// size>m<rows of x per threadgroup> and qmm<bits>g<group size>, each by the
// dtype of the scales.
func qmvEntries() []kernelEntry {
	var es []kernelEntry
	for _, bits := range quantBits {
		for _, gs := range quantGroupSizes {
			for _, m := range matvecMs {
				es = append(es, kernelEntry{"quant", qmvVariant(bits, gs, m), scaleDTypes})
			}
			es = append(es, kernelEntry{"quant", qmmVariant(bits, gs), scaleDTypes})
		}
	}
	return es
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

// Device classes: the last letter of an Apple GPU's architecture name
// (MTLDevice.architecture.name, "applegpu_g<generation><class>"), as
// Apple's chips use it: applegpu_g13g is the M1, g13s the M1 Pro, g13c the
// M1 Max, g13d the M1 Ultra, g14s the M2 Pro, g16s the M4 Pro; phones and
// tablets end in p. "s" is a Pro, not a Max (MLX's comments say otherwise).
const (
	classPhone = 'p'
	classBase  = 'g'
	classPro   = 's'
	classMax   = 'c'
	classUltra = 'd'
)

// deviceClass is the class of a device from its architecture name, or from
// its marketing name ("Apple M2 Max") when the architecture is unknown.
func deviceClass(info DeviceInfo) byte {
	if a := info.Architecture; strings.HasPrefix(a, "applegpu_") && a != "applegpu_" {
		switch c := a[len(a)-1]; c {
		case classPhone, classBase, classPro, classMax, classUltra:
			return c
		}
	}
	switch n := info.Name; {
	case strings.Contains(n, "Ultra"):
		return classUltra
	case strings.Contains(n, "Max"):
		return classMax
	case strings.Contains(n, "Pro"):
		return classPro
	default:
		return classBase
	}
}
