package main

import "golang.org/x/sys/unix"

// cpuModelAndMemory asks sysctl for the CPU's brand string and hw.memsize.
func cpuModelAndMemory() (model string, memory uint64) {
	model, _ = unix.Sysctl("machdep.cpu.brand_string")
	memory, _ = unix.SysctlUint64("hw.memsize")
	return model, memory
}
