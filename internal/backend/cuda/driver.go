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
	// close releases the device.
	close()

	// enter prepares the calling goroutine for the hot calls below, once
	// per Run rather than once per call: the real driver locks it to its
	// OS thread and makes the context current. Every call of launch,
	// sync, uploadAsync and a graphExec's launch is made between enter
	// and exit, on the goroutine that entered; the others may be made
	// anywhere, inside or outside.
	enter() error
	// exit undoes enter.
	exit()
	// launch queues a kernel launch on the backend's stream.
	launch(l *launch) error
	// sync waits until everything queued on the stream has finished, and
	// reports the first failure among it.
	sync() error
	// uploadAsync queues a copy of src to device address dst on the
	// stream; src (memory from hostAlloc) must not change until the next
	// sync.
	uploadAsync(dst devptr, src []byte) error

	// hostAlloc returns n bytes of host memory the device copies from
	// without staging it again (pinned, on the real driver), and hostFree
	// releases it.
	hostAlloc(n int) ([]byte, error)
	hostFree(b []byte)
	// newGraph builds and instantiates a graph of kernel nodes; the
	// launches' arguments are copied, so they may change afterwards.
	newGraph(nodes []graphNode) (graphExec, error)
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
