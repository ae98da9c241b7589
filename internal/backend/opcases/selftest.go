package opcases

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// KernelVerdict is the self-test result of one kernel: over every op case
// that ran it, the worst error against the reference (the CPU backend, in
// the GPU self-tests) and the fastest run of its largest case.
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

// A Device is what SelfTest needs of a GPU backend.
type Device struct {
	// Backend runs the cases.
	Backend graph.Backend
	// Kernels are every kernel the backend has, in the order to report.
	Kernels []string
	// Broken maps kernels known to fail before any case runs (a file the
	// device's compiler refused) to why; they are reported failed.
	Broken map[string]string
	// Launched is the kernels a plan that has run (on Backend or Dry)
	// launches, in order.
	Launched func(p *graph.Plan) []string
	// Dry is a backend of Backend's kind over a fake device that executes
	// nothing. A case that failed before running (its plan never ran) is
	// run on it to learn which kernels it would launch: they are the ones
	// blamed.
	Dry graph.Backend
}

// SelfTest runs every case once on the device's backend and on ref, the
// reference (package opcases imports no backend: the caller passes the
// CPU's), and returns a verdict per kernel, in d.Kernels order. A kernel
// no case reached fails with "not covered". progress, if not nil, is
// called after each case.
func SelfTest(d Device, ref graph.Backend, cases []Case, progress func(done, total int)) ([]KernelVerdict, error) {
	verdicts := map[string]*KernelVerdict{}
	largest := map[string]int{}
	for _, k := range d.Kernels {
		verdicts[k] = &KernelVerdict{Kernel: k, Fail: d.Broken[k]}
	}
	for i, c := range cases {
		want, err := Eval(ref, c)
		if err != nil {
			return nil, fmt.Errorf("selftest: %s on the reference (%s): %w", c.Name, ref.Name(), err)
		}
		got, kernels, elapsed, size, runErr := timedCase(d, c)
		msg, rel := "", 0.0
		if runErr == nil {
			msg, rel = Compare(got, want, c.Tol, c.Floor)
		} else {
			msg = runErr.Error()
			if len(kernels) == 0 {
				kernels = planned(d, c)
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
	for _, k := range d.Kernels {
		v := verdicts[k]
		if v.Cases == 0 && v.Fail == "" {
			v.Fail = "not covered by any case"
		}
		out = append(out, *v)
	}
	return out, nil
}

// planned is the kernels case c launches on d.Dry: those its plan was
// encoded into, even when the dry run itself fails.
func planned(d Device, c Case) []string {
	outs, _ := c.Build(d.Dry, graph.New())
	p, err := graph.Compile(d.Dry, outs...)
	if err != nil {
		return nil
	}
	defer p.Free()
	_ = p.Run() // encodes the plan; what it launched is known either way
	return d.Launched(p)
}

// timedCase runs a case twice (the first run compiles and encodes the
// plan) and times the second.
func timedCase(d Device, c Case) (res []any, kernels []string, elapsed time.Duration, size int, err error) {
	g := graph.New()
	outs, inputs := c.Build(d.Backend, g)
	p, err := graph.Compile(d.Backend, outs...)
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
	kernels = d.Launched(p)
	// Var inputs (KV caches) were updated in place by the first run, which
	// is the one compared; the second run is for timing only.
	if res, err = ReadOutputs(p, outs); err != nil {
		return nil, nil, 0, 0, err
	}
	start := time.Now()
	if err := p.Run(); err != nil {
		return nil, nil, 0, 0, err
	}
	return res, kernels, time.Since(start), size, nil
}

// WriteVerdicts prints verdicts as a table and a summary line; it reports
// whether every kernel passed.
func WriteVerdicts(w io.Writer, vs []KernelVerdict) bool {
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
