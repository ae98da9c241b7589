package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter/runtime/formats"
	"github.com/seed9b8f47b1/redrafter/runtime/llama"
	"github.com/seed9b8f47b1/redrafter/runtime/tokenizer"
)

func newInspectCmd() *cobra.Command {
	var tensors bool
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Describe a model file: architecture, tensor shapes and dtypes, tokenizer",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return inspect(cmd.OutOrStdout(), args[0], tensors)
		},
	}
	cmd.Flags().BoolVar(&tensors, "tensors", true, "list every tensor")
	return cmd
}

func inspect(w io.Writer, path string, listTensors bool) error {
	ck, err := llama.Open(path)
	if err != nil {
		return err
	}
	defer ck.Close()
	c := ck.Model.Config
	fmt.Fprintf(w, "model:        %s\n", path)
	fmt.Fprintf(w, "architecture: %s\n", c.Arch)
	fmt.Fprintf(w, "layers %d, dim %d, ffn %d, heads %d (kv %d, head dim %d), vocab %d, context %d\n",
		c.Layers, c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim, c.Vocab, c.Context)
	fmt.Fprintf(w, "rope base %g, dims %d, pairs %s, scaling %q; rms eps %g; tied output %v; qkv bias %v\n",
		c.RopeTheta, c.RopeDims, map[bool]string{true: "neox", false: "adjacent"}[c.RopeNeoX], c.RopeScale.Type,
		c.NormEps, c.TiedOutput, c.QKVBias)
	var vocab *tokenizer.Vocab
	if ck.Meta != nil {
		vocab, err = tokenizer.FromGGUFMetadata(ck.Meta)
	} else {
		vocab, err = tokenizer.LoadHF(ck.Dir)
		if err != nil {
			vocab, err = tokenizer.LoadSentencePiece(filepath.Join(ck.Dir, "tokenizer.model"))
		}
	}
	if err != nil {
		fmt.Fprintf(w, "tokenizer:    none usable (%v)\n", err)
	} else {
		fmt.Fprintf(w, "tokenizer:    %s, %d tokens, bos %d, eos %d, chat template %s\n", vocab.Model, len(vocab.Tokens),
			vocab.BOS, vocab.EOS, orNone(tokenizer.DetectTemplate(vocab.ChatTemplate), vocab.ChatTemplate != ""))
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

func orNone(name string, present bool) string {
	switch {
	case name != "":
		return name
	case present:
		return "present (not a built-in family)"
	}
	return "none"
}
