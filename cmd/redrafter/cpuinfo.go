package main

import (
	"fmt"
	"io"
	"runtime"
)

// cpuInfo describes the machine's CPU and memory for `redrafter devices`.
type cpuInfo struct {
	Model  string // "" when the OS does not say
	Cores  int    // logical CPUs Go can run on
	Memory uint64 // bytes of RAM (0: unknown)
}

func readCPUInfo() cpuInfo {
	c := cpuInfo{Cores: runtime.NumCPU()}
	c.Model, c.Memory = cpuModelAndMemory()
	return c
}

// writeCPU prints the CPU as a device: the cpu backend runs on every
// machine, so it is always listed.
func writeCPU(w io.Writer, c cpuInfo) {
	model := c.Model
	if model == "" {
		model = runtime.GOARCH
	}
	mem := "unknown memory"
	if c.Memory > 0 {
		mem = fmt.Sprintf("%.1f GiB memory", float64(c.Memory)/(1<<30))
	}
	fmt.Fprintf(w, "cpu: %s, %d cores, %s (backend cpu)\n", model, c.Cores, mem)
}
