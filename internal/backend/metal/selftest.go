package metal

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// KernelVerdict is the self-test result of one kernel (package opcases).
type KernelVerdict = opcases.KernelVerdict

// SelfTest runs every op case once on be and on the CPU reference backend
// and returns a verdict per kernel of the library, in library order. A
// kernel no case reached fails with "not covered". progress, if not nil,
// is called after each case.
func SelfTest(be *Backend, seed uint64, progress func(done, total int)) ([]KernelVerdict, error) {
	lib, err := msl.Library()
	if err != nil {
		return nil, err
	}
	d := opcases.Device{Backend: be, Broken: map[string]string{}, Planned: caseKernels,
		Launched: func(p *graph.Plan) []string {
			var names []string
			if st, ok := p.BackendState.(*planState); ok {
				for _, d := range st.ds {
					names = append(names, d.pipe.name())
				}
			}
			return names
		}}
	// Compile every kernel first: a file Apple's compiler refuses fails its
	// own kernels, with the compiler's log, and the others still run.
	for _, k := range lib {
		d.Kernels = append(d.Kernels, k.Name)
		if _, err := be.pipeline(k.Name); err != nil {
			d.Broken[k.Name] = "does not compile: " + err.Error()
		}
	}
	return opcases.SelfTest(d, opcases.All(rand.New(rand.NewPCG(seed, 5))), progress)
}

// caseKernels is the kernels a case dispatches, found by encoding it for
// the fake device (which compiles nothing and cannot fail to).
func caseKernels(c opcases.Case) []string {
	fake := NewFake(DefaultPolicy(DeviceInfo{}))
	defer fake.Close()
	g := graph.New()
	outs, _ := c.Build(fake, g)
	p, err := graph.Compile(fake, outs...)
	if err != nil {
		return nil
	}
	defer p.Free()
	st, err := fake.encodePlan(p)
	if err != nil {
		return nil
	}
	var names []string
	for _, d := range st.ds {
		names = append(names, d.pipe.name())
	}
	return names
}

// WriteSelfTest prints verdicts as a table and a summary line; it reports
// whether every kernel passed.
func WriteSelfTest(w io.Writer, dev DeviceInfo, vs []KernelVerdict) bool {
	fmt.Fprintf(w, "device: %s (%s, %s)\n", dev.Name, orUnknown(dev.Architecture), orUnknown(dev.Family))
	return opcases.WriteVerdicts(w, vs)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// DeviceReport is one GPU as `redrafter devices` lists it.
type DeviceReport struct {
	DeviceInfo
	Beam   BeamShape
	Policy Policy
}

// Devices lists the system's GPUs with their recommended beam shape and
// command-buffer policy. Without Metal it returns the reason.
func Devices() ([]DeviceReport, error) {
	infos, err := listDevices()
	if err != nil {
		return nil, err
	}
	var rs []DeviceReport
	for _, inf := range infos {
		rs = append(rs, DeviceReport{DeviceInfo: inf, Beam: RecommendedBeam(inf), Policy: DefaultPolicy(inf)})
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	return rs, nil
}

// WriteDevices prints device reports as a table.
func WriteDevices(w io.Writer, rs []DeviceReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tarchitecture\tfamily\tcores\tunified\tworking set\tmax buffer\tbeam (W×L)\tops/buffer")
	for _, r := range rs {
		cores := "unknown"
		if r.Cores > 0 {
			cores = strconv.Itoa(r.Cores)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%d×%d\t%d\n", r.Name, orUnknown(r.Architecture), orUnknown(r.Family),
			cores, r.UnifiedMemory, gib(r.WorkingSet), gib(r.MaxBuffer), r.Beam.Width, r.Beam.Length, r.Policy.OpsPerBuffer)
	}
	tw.Flush()
}

func gib(n uint64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<30)), ".0") + " GiB"
}
