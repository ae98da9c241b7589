package cpu

import "golang.org/x/sys/unix"

// physicalMemory is hw.memsize in bytes, 0 if unreadable.
func physicalMemory() int64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return int64(n)
}
