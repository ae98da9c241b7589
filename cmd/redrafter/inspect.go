package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

func newInspectCmd() *cobra.Command {
	var tensors bool
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Describe a model file or a draft head: architecture, tensor shapes and dtypes, tokenizer",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return inspect(cmd.OutOrStdout(), args[0], tensors)
		},
	}
	cmd.Flags().BoolVar(&tensors, "tensors", true, "list every tensor")
	return cmd
}

func inspect(w io.Writer, path string, listTensors bool) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, plainErr(err))
	}
	if !st.IsDir() && !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a model file or directory (it is a %s)", path, fileKind(st.Mode()))
	}
	if isDrafterDir(path) {
		return inspectDrafter(w, path, listTensors)
	}
	ck, err := llama.Open(path)
	if err != nil {
		return err
	}
	defer ck.Close()
	c := ck.Model.Config
	fmt.Fprintf(w, "model:        %s\n", path)
	fmt.Fprintf(w, "architecture: %s\n", c.Arch)
	if ck.Ignored != "" {
		fmt.Fprintf(w, "note:         %s\n", ck.Ignored)
	}
	fmt.Fprintf(w, "layers %d, dim %d, ffn %d, heads %d (kv %d, head dim %d), vocab %d, context %d\n",
		c.Layers, c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim, c.Vocab, c.Context)
	fmt.Fprintf(w, "rope base %g, dims %d, pairs %s, scaling %q; rms eps %g; tied output %v; qkv bias %v\n",
		c.RopeTheta, c.RopeDims, map[bool]string{true: "neox", false: "adjacent"}[c.RopeNeoX], c.RopeScale.Type,
		c.NormEps, c.TiedOutput, c.QKVBias)
	if rs := c.RopeScale; rs.Type == "longrope" {
		fmt.Fprintf(w, "longrope: the short factors for a context (--context) up to the original %d tokens, the long ones beyond; attention factor %.4g\n",
			rs.OriginalContext, rs.AttnFactor)
	}
	if c.SlidingWindow > 0 {
		fmt.Fprintf(w, "sliding window %d positions (a mask; the KV cache stays full-length)\n", c.SlidingWindow)
	}
	if c.SlidingPattern > 0 {
		fmt.Fprintf(w, "a global layer (no window) every %d layers", c.SlidingPattern)
		if c.RopeLocalTheta > 0 {
			fmt.Fprintf(w, "; the sliding layers' rope base %g, unscaled", c.RopeLocalTheta)
		}
		fmt.Fprintln(w)
	}
	if c.PostNorms {
		fmt.Fprintf(w, "gemma: embeddings × %g, norms after attention and MLP too, q/k head norms %v, GeGLU %v, attention scale %g\n",
			c.EmbedScale, c.QKNorm, c.GeGLU, c.AttnScale)
	}
	if c.AttnSoftCap > 0 || c.FinalSoftCap > 0 {
		fmt.Fprintf(w, "soft-caps: attention scores %g, logits %g (0: none)\n", c.AttnSoftCap, c.FinalSoftCap)
	}
	writeLayersRunAs(w, &c)
	var vocab *tokenizer.Vocab
	if ck.Meta != nil {
		vocab, err = tokenizer.FromGGUFMetadata(ck.Meta)
	} else {
		vocab, err = tokenizer.LoadHF(ck.Dir)
		if err != nil {
			vocab, err = tokenizer.LoadSentencePiece(filepath.Join(ck.Dir, "tokenizer.model"))
		}
		if err == nil && vocab.ChatTemplate == "" {
			// As Load reads it for a checkpoint with only tokenizer.model.
			vocab.ChatTemplate, err = tokenizer.ReadChatTemplate(ck.Dir)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "tokenizer:    none usable (%v)\n", err)
	} else {
		fmt.Fprintf(w, "tokenizer:    %s, %d tokens, bos %d, eos %d, chat template %s\n", vocab.Model, len(vocab.Tokens),
			vocab.BOS, vocab.EOS, chatTemplateSummary(vocab.ChatTemplate))
	}
	if ck.Meta != nil {
		g, err := formats.OpenGGUF(path)
		if err != nil {
			return err
		}
		defer g.Close()
		writeTensorTypes(w, g.Tensors)
	}
	if !listTensors {
		return nil
	}
	type row struct {
		name, dtype string
		shape       []int
	}
	var rows []row
	if ck.Meta != nil {
		g, err := formats.OpenGGUF(path)
		if err != nil {
			return err
		}
		defer g.Close()
		for _, t := range g.Tensors {
			rows = append(rows, row{t.Name, t.DType.String(), t.Shape})
		}
	} else {
		st, err := formats.OpenSafetensorsDir(path)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, t := range st.Tensors {
			rows = append(rows, row{t.Name, t.DType.String(), t.Shape})
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	}
	fmt.Fprintf(w, "tensors:      %d\n", len(rows))
	for _, r := range rows {
		fmt.Fprintf(w, "  %-40s %-5s %v\n", r.name, r.dtype, r.shape)
	}
	return nil
}

// inspectBackends are the backends inspect describes. Only their Supports
// and FusesLayers are called, which for Metal and CUDA depend on their
// kernels alone, not on a device, so zero values answer them on any
// machine.
func inspectBackends() []struct {
	name string
	be   graph.Backend
} {
	return []struct {
		name string
		be   graph.Backend
	}{{"cpu", cpu.New(1)}, {"metal", new(metal.Backend)}, {"cuda", new(cuda.Backend)}}
}

// writeTensorTypes lists the tensor types of a GGUF file, with how many
// tensors of each and how each backend runs them (llama.RunsAs).
func writeTensorTypes(w io.Writer, tensors []formats.Tensor) {
	count := map[formats.DType]int{}
	var types []formats.DType
	for _, t := range tensors {
		if count[t.DType] == 0 {
			types = append(types, t.DType)
		}
		count[t.DType]++
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	backends := inspectBackends()
	fmt.Fprintf(w, "tensor types: how each runs on cpu, metal, cuda\n")
	for _, t := range types {
		var how []string
		for _, b := range backends {
			how = append(how, b.name+": "+llama.RunsAs(t, b.be))
		}
		fmt.Fprintf(w, "  %-7s %4d tensors   %s\n", t, count[t], strings.Join(how, "; "))
	}
}

// writeLayersRunAs says how each backend runs the model's layers
// (llama.LayersRunAs).
func writeLayersRunAs(w io.Writer, c *llama.Config) {
	var how []string
	for _, b := range inspectBackends() {
		how = append(how, b.name+": "+llama.LayersRunAs(c, b.be))
	}
	fmt.Fprintf(w, "layers run as %s\n", strings.Join(how, "; "))
}

// chatTemplateSummary says what chat will do with the model's template.
func chatTemplateSummary(src string) string {
	if strings.TrimSpace(src) == "" {
		return "none (chat guesses vicuna)"
	}
	if _, err := tokenizer.CompileTemplate(src); err != nil {
		return fmt.Sprintf("the model's own, which does not compile (%v)", err)
	}
	return fmt.Sprintf("the model's own (Jinja, %d bytes; chat renders it)", len(src))
}

// isDrafterDir reports whether path holds a ReDrafter head (its config.json
// has the head's fields).
func isDrafterDir(path string) bool {
	raw, err := formats.ReadFile(filepath.Join(path, "config.json"))
	if err != nil {
		return false
	}
	var c struct {
		ModelType string `json:"model_type"`
		ExitDim   *int   `json:"exit_dim"`
	}
	return json.Unmarshal(raw, &c) == nil && (c.ModelType == "recurrent_drafting_drafter" || c.ExitDim != nil)
}

func inspectDrafter(w io.Writer, path string, listTensors bool) error {
	h, err := drafter.Load(path)
	if err != nil {
		return err
	}
	defer h.Close()
	c := h.Config
	kind := "recurrent (rnn)"
	if !c.RNN {
		kind = "running sum of embeddings (rnn: false)"
	}
	fmt.Fprintf(w, "drafter:      %s\n", path)
	fmt.Fprintf(w, "ReDrafter head for an LLM with hidden size %d and vocabulary %d\n", c.HiddenSize, c.VocabSize)
	fmt.Fprintf(w, "state: %s; exit dim %d (input projection: %v); %d residual blocks\n", kind, c.ExitDim,
		h.InputProj.Present(), c.NumDraftLayers)
	if !listTensors {
		return nil
	}
	st, err := formats.OpenSafetensorsDir(path)
	if err != nil {
		return err
	}
	defer st.Close()
	var names []string
	params := 0
	for n, t := range st.Tensors {
		names = append(names, n)
		params += t.NumElements()
	}
	sort.Strings(names)
	fmt.Fprintf(w, "parameters:   %d\ntensors:      %d\n", params, len(names))
	for _, n := range names {
		t := st.Tensors[n]
		fmt.Fprintf(w, "  %-40s %-5s %v\n", n, t.DType, t.Shape)
	}
	return nil
}
