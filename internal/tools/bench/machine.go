package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// cpuModel is the processor's name from /proc/cpuinfo ("" where there is
// none), with its SIMD extensions that matter to the kernels.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	var name string
	var flags []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && (name == "" || flags == nil) {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			name = strings.TrimSpace(v)
		case "flags":
			have := map[string]bool{}
			for _, f := range strings.Fields(v) {
				have[f] = true
			}
			flags = []string{}
			for _, f := range []string{"avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_fp16", "avx512_bf16", "amx_bf16"} {
				if have[f] {
					flags = append(flags, f)
				}
			}
		}
	}
	if len(flags) > 0 {
		name += " (" + strings.Join(flags, " ") + ")"
	}
	return name
}

// loadAvg reads the load averages from /proc/loadavg (zeros where there is
// none).
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}
