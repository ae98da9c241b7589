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
	ar := r.Autoregressive
	ew.printf("autoregressive  %d tokens in %.2f s: %.2f tokens/s (%.2f ms per token)\n\n",
		ar.Tokens, ar.DecodeSeconds, ar.TokensPerSecond, ar.MSPerToken())
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
