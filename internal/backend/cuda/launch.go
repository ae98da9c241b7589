package cuda

import (
	"encoding/binary"
	"math"
)

// devptr is a device address (CUdeviceptr).
type devptr uint64

// launch is one kernel launch: what the backend passes to cuLaunchKernel
// and the emulator runs. params holds the kernel's arguments laid out as
// CU_LAUNCH_PARAM_BUFFER_POINTER takes them: each at the next multiple of
// its alignment, in the kernel's parameter order.
type launch struct {
	kernel string
	grid   [3]int
	block  [3]int
	params []byte
	ptrs   []devptr // the pointer arguments, for the emulator and checks

	seam *Launch // the launch as a Driver gets it (seam.go), made once
	fn   uintptr // the real driver's CUfunction, looked up once
}

func (l *launch) align(n int) {
	for len(l.params)%n != 0 {
		l.params = append(l.params, 0)
	}
}

func (l *launch) ptr(p devptr) *launch {
	l.align(8)
	l.params = binary.LittleEndian.AppendUint64(l.params, uint64(p))
	l.ptrs = append(l.ptrs, p)
	return l
}

func (l *launch) i32(v int) *launch {
	l.align(4)
	l.params = binary.LittleEndian.AppendUint32(l.params, uint32(int32(v)))
	return l
}

func (l *launch) u64(v int) *launch {
	l.align(8)
	l.params = binary.LittleEndian.AppendUint64(l.params, uint64(v))
	return l
}

func (l *launch) f32(v float32) *launch {
	l.align(4)
	l.params = binary.LittleEndian.AppendUint32(l.params, math.Float32bits(v))
	return l
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func newLaunch(kernel string, grid [3]int, threads int) *launch {
	return &launch{kernel: kernel, grid: grid, block: [3]int{threads, 1, 1}}
}

func grid1(n int) [3]int    { return [3]int{max(n, 1), 1, 1} }
func grid2(x, y int) [3]int { return [3]int{max(x, 1), max(y, 1), 1} }
