package kernels

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPU is the CPU time of the calling OS thread (lock it first).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1
	syscall.Syscall(syscall.SYS_GETRUSAGE, rusageThread, uintptr(unsafe.Pointer(&ru)), 0)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
