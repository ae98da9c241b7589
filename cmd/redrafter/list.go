package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter/internal/hub"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the models and draft heads in the hub cache",
		Long: `List the models and draft heads in the Hugging Face hub cache, whichever
tool downloaded them: repository, revision (branch and commit), size, files,
quantization, architecture, and for a model the cached draft heads that name it
as their base (--drafter auto takes one), for a head the model it drafts for.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newHubClient(nil)
			if err != nil {
				return err
			}
			all, err := c.List()
			if err != nil {
				return err
			}
			return printList(cmd.OutOrStdout(), all)
		},
	}
}

func printList(out io.Writer, all []hub.Cached) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REPO\tREVISION\tSIZE\tFILES\tQUANT\tARCH\tDRAFT HEAD")
	for _, c := range all {
		rev := short(c.Commit)
		if len(c.Refs) > 0 {
			rev = strings.Join(c.Refs, ",") + " " + rev
		}
		quant, arch := describe(c)
		head := "-"
		if len(c.BaseModels) > 0 && isDrafterDir(c.Dir) {
			head = "for " + strings.Join(c.BaseModels, ", ")
		} else {
			var names []string
			for _, h := range hub.HeadsFor(all, c.Repo) {
				if !slices.Contains(names, h.Repo) {
					names = append(names, h.Repo)
				}
			}
			if len(names) > 0 {
				head = strings.Join(names, ", ")
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.Repo, rev, hub.Size(c.Size), len(c.Files), quant, arch, head)
	}
	return w.Flush()
}

// ggufFileTypes names llama.cpp's general.file_type values (llama_ftype)
// for GGUF files whose names carry no quantization.
var ggufFileTypes = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
	11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
	17: "Q5_K_M", 18: "Q6_K", 32: "BF16",
}

// describe says a snapshot's quantization and architecture: from its GGUF
// files' names and metadata, or its config.json ("head" for a draft head).
func describe(c hub.Cached) (quant, arch string) {
	var quants, archs []string
	add := func(list *[]string, s string) {
		if s != "" && !slices.Contains(*list, s) {
			*list = append(*list, s)
		}
	}
	for _, f := range c.Files {
		if !strings.HasSuffix(strings.ToLower(f), ".gguf") {
			continue
		}
		q := hub.Quant(f)
		g, err := formats.OpenGGUF(filepath.Join(c.Dir, filepath.FromSlash(f)))
		if err == nil {
			add(&archs, g.Architecture())
			if ft, ok := g.Uint("general.file_type"); ok && q == "" {
				q = ggufFileTypes[ft]
			}
			if q == "" {
				q = matrixType(g)
			}
			g.Close()
		}
		add(&quants, q)
	}
	if len(archs) == 0 {
		if b, err := os.ReadFile(filepath.Join(c.Dir, "config.json")); err == nil {
			var cfg struct {
				Architectures []string `json:"architectures"`
				ModelType     string   `json:"model_type"`
				TorchDType    string   `json:"torch_dtype"`
				Quantization  *struct {
					Bits int `json:"bits"`
				} `json:"quantization"`
			}
			if json.Unmarshal(b, &cfg) == nil {
				switch {
				case isDrafterDir(c.Dir):
					add(&archs, "head")
				case len(cfg.Architectures) > 0:
					add(&archs, cfg.Architectures[0])
				default:
					add(&archs, cfg.ModelType)
				}
				if cfg.Quantization != nil {
					add(&quants, fmt.Sprintf("%d-bit", cfg.Quantization.Bits))
				} else {
					add(&quants, cfg.TorchDType)
				}
			}
		}
	}
	return orDash(quants), orDash(archs)
}

func orDash(list []string) string {
	if len(list) == 0 {
		return "-"
	}
	return strings.Join(list, ",")
}

// matrixType is the type most of a GGUF's matrices have, for a file that
// names no quantization (the demo's F32).
func matrixType(g *formats.GGUF) string {
	count := map[string]int{}
	best := ""
	for _, t := range g.Tensors {
		if len(t.Shape) != 2 {
			continue
		}
		name := strings.ToUpper(t.DType.String())
		count[name]++
		if count[name] > count[best] {
			best = name
		}
	}
	return best
}
