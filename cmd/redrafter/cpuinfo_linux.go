package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// cpuModelAndMemory reads /proc/cpuinfo's first "model name" and
// /proc/meminfo's MemTotal.
func cpuModelAndMemory() (model string, memory uint64) {
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err == nil {
					memory = kb << 10
				}
				break
			}
		}
	}
	return model, memory
}
