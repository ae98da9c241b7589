package cuda

// driver is what the backend needs of the CUDA driver. Two implement it:
// the real one over libcuda.so.1 (driver_linux.go, build tag cuda), and
// any other Driver given to NewWithDriver (seam.go), such as package
// cudafake's, whose memory is host memory and whose launches are executed
// by a function the tests give (package cudatest runs each on the
// emulated kernels). Everything above it, the plan encoder and the launch
// arguments included, is the same code on both.
type driver interface {
	// info describes the device.
	info() DeviceInfo
	// alloc returns n bytes of zeroed device memory.
	alloc(n int) (devptr, error)
	// free releases memory from alloc.
	free(p devptr)
	// upload copies src to device address dst (synchronously).
	upload(dst devptr, src []byte) error
	// download copies from device address src into dst (synchronously,
	// after every launch queued before it).
	download(dst []byte, src devptr) error
	// launch queues a kernel launch on the backend's stream.
	launch(l *launch) error
	// sync waits until every queued launch has finished, and reports the
	// first failure among them.
	sync() error
	// close releases the device.
	close()
}

// DeviceInfo describes a GPU as `redrafter devices` lists it.
type DeviceInfo struct {
	Name string
	// Major and Minor are the compute capability (8.0 for an A100, 9.0
	// for an H100).
	Major, Minor int
	// Memory is the device memory in bytes.
	Memory int64
	// Multiprocessors is the number of streaming multiprocessors.
	Multiprocessors int
	// Driver is the CUDA version of the driver, e.g. 12040.
	Driver int
}
