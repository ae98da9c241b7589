package metal

import "github.com/seed9b8f47b1/redrafter/internal/graph"

// What a GPU self-test (package metalcheck) asks of the backend beyond
// graph.Backend: which kernels a plan dispatched, and whether one kernel
// builds on the device.

// Dispatched returns the kernels a plan that has run on a Metal backend
// dispatches, in order (nil for a plan of another backend).
func Dispatched(p *graph.Plan) []string {
	st, ok := p.BackendState.(*planState)
	if !ok {
		return nil
	}
	var names []string
	for _, d := range st.ds {
		names = append(names, d.pipe.name())
	}
	return names
}

// BuildKernel builds one kernel's pipeline, compiling its file on first
// use; the error is the compiler's.
func (b *Backend) BuildKernel(name string) error {
	_, err := b.pipeline(name)
	return err
}
