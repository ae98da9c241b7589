package metal

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seed9b8f47b1/redrafter/backend/cpu"
	msl "github.com/seed9b8f47b1/redrafter/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/graph"
)

// KernelVerdict is the self-test result of one kernel: over every op case
// that dispatched it, the worst error against the CPU reference and the
// fastest run of its largest case.
type KernelVerdict struct {
	Kernel string
	Cases  int
	MaxErr float64 // error relative to the largest reference magnitude (0 for integer outputs)
	Tol    float64
	Time   time.Duration // wall time of one Run of the kernel's largest case
	Fail   string        // why it failed; empty when it passed
}

// OK reports whether the kernel passed.
func (v KernelVerdict) OK() bool { return v.Fail == "" }

// SelfTest runs every op case once on be and on the CPU reference backend
// and returns a verdict per kernel of the library, in library order. A
// kernel no case reached fails with "not covered". progress, if not nil,
// is called after each case.
func SelfTest(be *Backend, seed uint64, progress func(done, total int)) ([]KernelVerdict, error) {
	lib, err := msl.Library()
	if err != nil {
		return nil, err
	}
	ref := cpu.NewReference()
	verdicts := map[string]*KernelVerdict{}
	largest := map[string]int{}
	for _, k := range lib {
		verdicts[k.Name] = &KernelVerdict{Kernel: k.Name}
	}
	// Compile every kernel first: a file Apple's compiler refuses fails its
	// own kernels, with the compiler's log, and the others still run.
	for _, k := range lib {
		if _, err := be.pipeline(k.Name); err != nil {
			verdicts[k.Name].Fail = "does not compile: " + err.Error()
		}
	}
	cases := opcases.All(rand.New(rand.NewPCG(seed, 5)))
	for i, c := range cases {
		want, err := opcases.Eval(ref, c)
		if err != nil {
			return nil, fmt.Errorf("metal: selftest: %s on the CPU: %w", c.Name, err)
		}
		got, kernels, elapsed, size, runErr := timedCase(be, c)
		msg, rel := "", 0.0
		if runErr == nil {
			msg, rel = opcases.Compare(got, want, c.Tol, c.Floor)
		} else {
			msg = runErr.Error()
			if len(kernels) == 0 {
				// The plan never ran: blame the kernels it would have run.
				kernels = caseKernels(c)
			}
		}
		for _, k := range kernels {
			v := verdicts[k]
			if v == nil {
				v = &KernelVerdict{Kernel: k}
				verdicts[k] = v
			}
			v.Cases++
			v.Tol = max(v.Tol, c.Tol)
			if rel > v.MaxErr {
				v.MaxErr = rel
			}
			if msg != "" && v.Fail == "" {
				v.Fail = c.Name + ": " + msg
			}
			if size >= largest[k] {
				largest[k], v.Time = size, elapsed
			}
		}
		if progress != nil {
			progress(i+1, len(cases))
		}
	}
	var out []KernelVerdict
	for _, k := range lib {
		v := verdicts[k.Name]
		if v.Cases == 0 {
			v.Fail = "not covered by any case"
		}
		out = append(out, *v)
	}
	return out, nil
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

// timedCase runs a case on be twice (the first run compiles pipelines and
// encodes the plan) and times the second.
func timedCase(be *Backend, c opcases.Case) (res []any, kernels []string, elapsed time.Duration, size int, err error) {
	g := graph.New()
	outs, inputs := c.Build(be, g)
	p, err := graph.Compile(be, outs...)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	defer p.Free()
	for a, v := range inputs {
		if err := p.Write(a, v); err != nil {
			return nil, nil, 0, 0, err
		}
		size += len(graph.AsBytes(v))
	}
	if err := p.Run(); err != nil {
		return nil, nil, 0, 0, err
	}
	if st, ok := p.BackendState.(*planState); ok {
		for _, d := range st.ds {
			kernels = append(kernels, d.pipe.name())
		}
	}
	// Var inputs (KV caches) were updated in place by the first run, which
	// is the one compared; the second run is for timing only.
	if res, err = opcases.ReadOutputs(p, outs); err != nil {
		return nil, nil, 0, 0, err
	}
	start := time.Now()
	if err := p.Run(); err != nil {
		return nil, nil, 0, 0, err
	}
	return res, kernels, time.Since(start), size, nil
}

// WriteSelfTest prints verdicts as a table and a summary line; it reports
// whether every kernel passed.
func WriteSelfTest(w io.Writer, dev DeviceInfo, vs []KernelVerdict) bool {
	fmt.Fprintf(w, "device: %s (%s, %s)\n", dev.Name, orUnknown(dev.Architecture), orUnknown(dev.Family))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kernel\tcases\tmax err\ttol\ttime\tverdict")
	pass := 0
	var details []string // distinct multi-line failures, in order
	detailKernels := map[string][]string{}
	for _, v := range vs {
		verdict := "ok"
		if !v.OK() {
			first, rest, multi := strings.Cut(v.Fail, "\n")
			verdict = "FAIL " + first
			if multi && strings.TrimSpace(rest) != "" {
				if _, seen := detailKernels[v.Fail]; !seen {
					details = append(details, v.Fail)
				}
				detailKernels[v.Fail] = append(detailKernels[v.Fail], v.Kernel)
				verdict += " (more below)"
			}
		} else {
			pass++
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2g\t%.0e\t%v\t%s\n", v.Kernel, v.Cases, v.MaxErr, v.Tol, v.Time.Round(time.Microsecond), verdict)
	}
	tw.Flush()
	// A compiler log is shared by every kernel of its file: print it once.
	for _, d := range details {
		fmt.Fprintf(w, "\n== %s:\n%s\n", strings.Join(detailKernels[d], ", "), strings.TrimRight(d, "\n"))
	}
	if len(details) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", pass, len(vs)-pass)
	return pass == len(vs)
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
