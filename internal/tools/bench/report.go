package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report as a header and one row per (W, L).
func (r *Report) WriteTable(w io.Writer) error {
	m, d, mc := r.Model, r.Drafter, r.Machine
	ew := &errWriter{w: w}
	ew.printf("model     %s: %s, dim %d, %d layers, %d heads (%d KV) of %d, FFN %d, vocab %d, %s KV cache\n",
		r.Model.Path, m.Arch, m.Dim, m.Layers, m.Heads, m.KVHeads, m.HeadDim, m.FFN, m.Vocab, orUnknown(m.KVCache))
	if m.InflatedFrom != "" {
		ew.printf("          inflated from %s: same logits; the vocabulary cannot be padded, so it stays %d\n", m.InflatedFrom, m.Vocab)
	}
	kind := "running sum"
	if d.RNN {
		kind = "RNN"
	}
	ew.printf("drafter   %s: hidden %d, exit %d, %d blocks, %s\n", d.Path, d.HiddenSize, d.ExitDim, d.Layers, kind)
	ew.printf("machine   %s, %d cores, %d threads, %s backend, %s; load %.2f → %.2f (1-minute average)\n",
		orUnknown(mc.CPU), mc.Cores, mc.Threads, mc.Backend, mc.GoVersion, mc.LoadBefore[0], mc.LoadAfter[0])
	ew.printf("prompts   %d × up to %d new tokens, greedy (outputs identical), template %s; %s\n",
		len(r.Prompts), r.MaxTokens, r.Template, r.Date.Format("2006-01-02 15:04 MST"))
	if bw := mc.ReadBandwidth; bw[0] > 0 {
		where := fmt.Sprintf("on %d threads", mc.Threads)
		if mc.Backend != "cpu" {
			where = "of the " + mc.Backend + " device"
		}
		ew.printf("memory    streaming read bandwidth %s: %.1f GB/s before the runs, %.1f GB/s after\n",
			where, bw[0]/1e9, bw[1]/1e9)
	}
	ar := r.Autoregressive
	ew.printf("autoregressive  %d tokens in %.2f s: %.2f tokens/s (%.2f ms per token)\n",
		ar.Tokens, ar.DecodeSeconds, ar.TokensPerSecond, ar.MSPerToken())
	if m.DecodeBytes > 0 {
		ew.printf("                %.1f MB of weights read per token", float64(m.DecodeBytes)/1e6)
		if ar.BandwidthFraction > 0 {
			ew.printf(": %.1f GB/s, %.0f%% of the measured read bandwidth", ar.TokensPerSecond*float64(m.DecodeBytes)/1e9, 100*ar.BandwidthFraction)
		}
		ew.printf("\n")
	}
	ew.printf("\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "W\tL\ttok/s\tspeedup\ttok/step\tcompr\tN/step\tverify ms\t×AR\tdraft%\ttree%\tverify%\taccept%\tother%\t")
	for _, c := range r.Cells {
		rel := 0.0
		if ms := ar.MSPerToken(); ms > 0 {
			rel = c.VerifyPerStepMS / ms
		}
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f×\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n",
			c.W, c.L, c.TokensPerSecond, c.Speedup, c.TokensPerStep, c.Compression, c.MeanPacked,
			c.VerifyPerStepMS, rel, c.Split.Draft, c.Split.Tree, c.Split.Verify, c.Split.Accept, c.Split.Other)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ew.printf("\nN/step: tokens verified per step; verify ms: one verification pass; ×AR: that pass over one autoregressive step.\n")
	header := false
	for _, c := range r.Cells {
		if c.WaitsPerStep == 0 {
			continue
		}
		if !header {
			ew.printf("\ndevice work per step (host waits for the GPU, command buffers, dispatches):\n")
			header = true
		}
		ew.printf("  W=%d L=%d  %.2f waits, %.2f command buffers, %.1f dispatches\n",
			c.W, c.L, c.WaitsPerStep, c.CommandBuffersPerStep, c.DispatchesPerStep)
	}
	if len(r.Passes) > 0 {
		ew.printf("\none forward pass over N new tokens (all logits), median:\n")
		if err := WritePasses(ew, r.Passes); err != nil {
			return err
		}
	}
	return ew.err
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

func orUnknown(s string) string {
	if s == "" {
		return "unknown CPU"
	}
	return s
}

// WriteScaling prints one row per report of a thread-count sweep (the same
// benchmark run at each count): autoregressive decoding against the first
// report's, the read bandwidth measured at that count, the fraction of it
// reached, and the fastest ReDrafter shape.
func WriteScaling(w io.Writer, reports []*Report) error {
	if len(reports) == 0 {
		return nil
	}
	ew := &errWriter{w: w}
	ew.printf("scaling with threads (autoregressive decoding against the first row; bandwidth measured in each run):\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "threads\tAR tok/s\t×first\tread GB/s\tdecode GB/s\t% of read\tbest ReDrafter tok/s\tW\tL\t")
	base := reports[0].Autoregressive.TokensPerSecond
	for _, r := range reports {
		ar := r.Autoregressive
		rel := 0.0
		if base > 0 {
			rel = ar.TokensPerSecond / base
		}
		var best Cell
		for _, c := range r.Cells {
			if c.TokensPerSecond > best.TokensPerSecond {
				best = c
			}
		}
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f×\t%.1f\t%.1f\t%.0f%%\t%.2f\t%d\t%d\t\n", r.Machine.Threads, ar.TokensPerSecond, rel,
			r.Machine.Bandwidth()/1e9, ar.TokensPerSecond*float64(r.Model.DecodeBytes)/1e9, 100*ar.BandwidthFraction,
			best.TokensPerSecond, best.W, best.L)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return ew.err
}

// WriteJSONs writes the reports of a thread-count sweep as one indented JSON
// array.
func WriteJSONs(w io.Writer, reports []*Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(reports)
}
