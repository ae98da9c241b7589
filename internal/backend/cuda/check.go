package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// What a GPU self-test (package cudacheck) asks of the backend beyond
// graph.Backend: which kernels a plan launched, and a check of the kernel
// no op launches.

// ProbeKernel is bench's bandwidth probe, which no op launches:
// CheckProbe checks it instead.
const ProbeKernel = "read_xor_u32"

// CheckProbe runs the bandwidth probe over random words drawn from r and
// compares each block's XOR with the host's.
func (b *Backend) CheckProbe(r *rand.Rand) error {
	const blocks, words = 3, 4 * (5*256 + 17)
	data := make([]uint32, words)
	want := make([]uint32, blocks)
	for i := range data {
		data[i] = r.Uint32()
		want[(i/4/256)%blocks] ^= data[i]
	}
	got := make([]uint32, blocks)
	err := func() error {
		x, err := b.drv.alloc(4 * words)
		if err != nil {
			return err
		}
		defer b.drv.free(x)
		out, err := b.drv.alloc(4 * blocks)
		if err != nil {
			return err
		}
		defer b.drv.free(out)
		if err := b.drv.upload(x, graph.AsBytes(data)); err != nil {
			return err
		}
		err = b.onStream(func() error {
			err := b.drv.launch(readXorLaunch(out, x, words, blocks))
			if serr := b.drv.sync(); err == nil {
				err = serr
			}
			return err
		})
		if err != nil {
			return err
		}
		return b.drv.download(graph.AsBytes(got), out)
	}()
	if err != nil {
		return err
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("got %x, want %x", got, want)
	}
	return nil
}

// Launched returns the kernels a plan that has run on a CUDA backend
// launches, in order (nil for a plan of another backend).
func Launched(p *graph.Plan) []string {
	if st, ok := p.BackendState.(*planState); ok {
		return st.kernels()
	}
	return nil
}

func (st *planState) kernels() []string {
	var names []string
	for _, l := range st.launches {
		names = append(names, l.kernel)
	}
	return names
}
