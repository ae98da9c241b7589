//go:build !linux && !darwin

package main

// cpuModelAndMemory knows nothing on this OS; devices prints the
// architecture and core count.
func cpuModelAndMemory() (model string, memory uint64) { return "", 0 }
