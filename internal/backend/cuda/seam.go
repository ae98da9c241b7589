package cuda

// Driver is a CUDA driver other than NVIDIA's, for NewWithDriver: package
// cudafake's, whose memory is host memory and whose launches its caller
// runs (the tests run each on the emulated kernels). Addresses are device
// addresses (CUdeviceptr).
type Driver interface {
	// Info describes the device.
	Info() DeviceInfo
	// Alloc returns n bytes of zeroed device memory.
	Alloc(n int) (uint64, error)
	// Free releases memory from Alloc.
	Free(p uint64)
	// Upload copies src to device address dst (synchronously).
	Upload(dst uint64, src []byte) error
	// Download copies from device address src into dst (synchronously,
	// after every launch queued before it).
	Download(dst []byte, src uint64) error
	// Launch queues a kernel launch on the backend's stream. l is the
	// same for every Run of a plan: the driver must not change it.
	Launch(l *Launch) error
	// UploadAsync queues a copy of src to device address dst on the
	// stream, after what was queued before it; src does not change until
	// the next Sync.
	UploadAsync(dst uint64, src []byte) error
	// NewGraph returns an instantiated graph of kernel nodes (a CUDA
	// graph): launching it runs every node once, each after the nodes it
	// depends on and in any order otherwise.
	NewGraph(nodes []GraphNode) (Graph, error)
	// Sync waits until everything queued has finished, and reports the
	// first failure among it.
	Sync() error
	// Close releases the device.
	Close()
}

// GraphNode is one kernel node of a graph: its launch, and the nodes it
// depends on, by index, all before it.
type GraphNode struct {
	Launch *Launch
	Deps   []int
}

// Graph is an instantiated graph.
type Graph interface {
	// Launch queues one run of the graph on the stream.
	Launch() error
	// Destroy releases the graph.
	Destroy()
}

// Launch is one kernel launch as a Driver receives it.
type Launch struct {
	Kernel string // e.g. "matvec_f16"
	// File is the .cu file of package shaders that defines the kernel,
	// e.g. "matvec.cu", or "" if none does (the driver reports
	// CUDA_ERROR_NOT_FOUND).
	File  string
	Grid  [3]int // blocks
	Block [3]int // threads per block
	// Params are the kernel's arguments as CU_LAUNCH_PARAM_BUFFER_POINTER
	// passes them.
	Params []byte
	// Pointers are the pointer arguments among Params, in order.
	Pointers []uint64
}

// NewWithDriver returns a CUDA backend over d: the encoder, the launch
// arguments and the stream discipline are the same code as over NVIDIA's
// driver (Open).
func NewWithDriver(d Driver) *Backend { return newBackend(driverSeam{d}) }

// driverSeam is a Driver as the backend's driver.
type driverSeam struct{ d Driver }

func (s driverSeam) info() DeviceInfo                  { return s.d.Info() }
func (s driverSeam) free(p devptr)                     { s.d.Free(uint64(p)) }
func (s driverSeam) upload(dst devptr, b []byte) error { return s.d.Upload(uint64(dst), b) }
func (s driverSeam) download(b []byte, src devptr) error {
	return s.d.Download(b, uint64(src))
}
func (s driverSeam) sync() error { return s.d.Sync() }
func (s driverSeam) close()      { s.d.Close() }

func (s driverSeam) alloc(n int) (devptr, error) {
	p, err := s.d.Alloc(n)
	return devptr(p), err
}

func (s driverSeam) launch(l *launch) error { return s.d.Launch(l.exported()) }

// exported is l as a Driver receives it, made once: a plan's launches are
// the same at every Run, so Runs do not allocate it again.
func (l *launch) exported() *Launch {
	if l.seam == nil {
		ptrs := make([]uint64, len(l.ptrs))
		for i, p := range l.ptrs {
			ptrs[i] = uint64(p)
		}
		l.seam = &Launch{Kernel: l.kernel, File: kernelFiles[l.kernel], Grid: l.grid, Block: l.block,
			Params: l.params, Pointers: ptrs}
	}
	return l.seam
}

// The hot calls need no thread or context on a fake.
func (s driverSeam) enter() error { return nil }
func (s driverSeam) exit()        {}

func (s driverSeam) uploadAsync(dst devptr, b []byte) error { return s.d.UploadAsync(uint64(dst), b) }

// hostAlloc is ordinary memory: a fake's device memory is host memory.
func (s driverSeam) hostAlloc(n int) ([]byte, error) { return make([]byte, n), nil }
func (s driverSeam) hostFree([]byte)                 {}

func (s driverSeam) newGraph(nodes []graphNode) (graphExec, error) {
	gn := make([]GraphNode, len(nodes))
	for i, n := range nodes {
		gn[i] = GraphNode{Launch: n.l.exported(), Deps: n.deps}
	}
	g, err := s.d.NewGraph(gn)
	if err != nil {
		return nil, err
	}
	return seamGraph{g}, nil
}

type seamGraph struct{ g Graph }

func (g seamGraph) launch() error { return g.g.Launch() }
func (g seamGraph) destroy()      { g.g.Destroy() }
