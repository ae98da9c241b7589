package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// newRandomModelCmd writes a random-weight model in a real model's shape,
// for comparing implementations (docs/FORMATS.md, "Checked against
// llama.cpp").
func newRandomModelCmd() *cobra.Command {
	var (
		shape, arch, tokFrom, out string
		layers, window            int
		seed                      uint64
	)
	var names []string
	for n := range llamatest.Shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	cmd := &cobra.Command{
		Use:   "random-model --shape NAME --tokenizer-from MODEL.gguf --out OUT.gguf",
		Short: "Write a random-weight f32 GGUF model in a real model's layer widths",
		Long: `Write a model with random weights in the layer widths of a small real model
(` + strings.Join(names, ", ") + `), with --layers layers and the
vocabulary of the GGUF tokenizer copied from --tokenizer-from (its tokenizer.*
keys), as an f32 GGUF under llama.cpp's tensor names, which redrafter and
llama.cpp both load. The scales are described in docs/FORMATS.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, ok := llamatest.Shapes[shape]
			if !ok {
				return fmt.Errorf("--shape %q: want one of %s", shape, strings.Join(names, ", "))
			}
			if arch != "" {
				s.Arch = arch
			}
			if layers < 1 {
				return fmt.Errorf("--layers %d: want at least 1", layers)
			}
			s.Layers = layers
			if window != 0 {
				if window < 0 || s.SlidingWindow == 0 {
					return fmt.Errorf("--window %d: want a positive window, for a shape that has one (the gemma2 and phi3 shapes)", window)
				}
				s.SlidingWindow = window
			}
			if err := checkModelPath("--tokenizer-from", tokFrom); err != nil {
				return err
			}
			g, err := formats.OpenGGUF(tokFrom)
			if err != nil {
				return err
			}
			var tok []formats.KV
			for _, kv := range g.KVs() {
				if strings.HasPrefix(kv.Key, "tokenizer.") {
					tok = append(tok, kv)
				}
			}
			emb, ok := g.Tensor("token_embd.weight")
			if ok && len(emb.Shape) == 2 {
				s.Vocab = emb.Shape[0]
			}
			g.Close()
			if !ok || len(tok) == 0 {
				return fmt.Errorf("--tokenizer-from %s: no tokenizer.* keys or token_embd.weight", tokFrom)
			}
			// Written beside OUT and renamed, so that nothing half
			// written is left under its name.
			tmp := out + ".partial"
			if err := llamatest.WriteLlamaLikeGGUF(tmp, s, tok, seed); err != nil {
				return err
			}
			if err := cmd.Context().Err(); err != nil {
				os.Remove(tmp)
				return err
			}
			if err := os.Rename(tmp, out); err != nil {
				os.Remove(tmp)
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: random %s, %s widths, %d layers, vocabulary %d (seed %d)\n",
				out, s.Arch, shape, s.Layers, s.Vocab, seed)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&shape, "shape", "tinyllama", "layer widths of: "+strings.Join(names, ", "))
	f.StringVar(&arch, "arch", "", "architecture written (default the shape's: llama, qwen2, gemma2 or phi3; also mistral for llama's shapes)")
	f.IntVar(&layers, "layers", 2, "transformer blocks")
	f.IntVar(&window, "window", 0, "sliding window of a gemma2 or phi3 shape, in tokens (default the real model's)")
	f.StringVar(&tokFrom, "tokenizer-from", "", "GGUF model whose tokenizer (and vocabulary size) to copy (required)")
	f.StringVar(&out, "out", "", "the model to write (.gguf, required)")
	f.Uint64Var(&seed, "seed", 1, "seed of the weights")
	_ = cmd.MarkFlagRequired("tokenizer-from")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// newLogitsCmd decodes token-id prompts greedily and writes each step's
// logits, for comparison with another implementation's.
func newLogitsCmd(g *globalFlags) *cobra.Command {
	var (
		model, prompts, follow, out string
		n, ctxLen                   int
		reference                   bool
	)
	cmd := &cobra.Command{
		Use:   "logits --model MODEL --prompts IDS.txt --out DIR",
		Short: "Decode token-id prompts greedily and write every step's logits",
		Long: `Read prompts as lines of token ids (decimal, space-separated), decode
--tokens tokens greedily after each (the prompt in one forward pass, then one
token a pass, as llama.cpp's examples do; ties go to the lowest id) and write,
for prompt i, DIR/i.tokens (the generated ids, one line) and DIR/i.logits
(--tokens rows of the vocabulary's float32 logits, little-endian: row k is
the distribution token k was chosen from). With --follow FILE (lines of
generated ids, as i.tokens holds) the model is fed those tokens instead of
its own choices, so that logits compare position by position with the
implementation that chose them; i.tokens still holds its own argmaxes.
--reference runs the CPU's reference kernels, whose products are float32
over the weights' exact values: the fast kernels of 4- and 8-bit weights,
Q6_K and Q5_K round the activations to 8 bits on AVX-512 VNNI machines, as
llama.cpp's quantized products do. --context is the context the model runs
with, as llama.cpp's n_ctx: longrope models (Phi-3-mini-128k, Phi-3.5,
Phi-4-mini) take their short factors up to the original context and the
long ones beyond, as llama.cpp and the engine do (default: the model's
whole context).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 {
				return fmt.Errorf("--tokens %d: want at least 1", n)
			}
			if ctxLen < 0 {
				return fmt.Errorf("--context %d: want a positive number of tokens, or 0 for the model's", ctxLen)
			}
			if err := checkModelPath("--model", model); err != nil {
				return err
			}
			ps, err := readIDLines(prompts)
			if err != nil {
				return fmt.Errorf("--prompts: %w", err)
			}
			var forced [][]int32
			if follow != "" {
				if forced, err = readIDLines(follow); err != nil {
					return fmt.Errorf("--follow: %w", err)
				}
				if len(forced) != len(ps) {
					return fmt.Errorf("--follow has %d lines, --prompts %d", len(forced), len(ps))
				}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			ck, err := llama.Open(model)
			if err != nil {
				return err
			}
			defer ck.Close()
			var be graph.Backend = cpu.NewReference()
			if !reference {
				if be, err = graph.Open(g.backend); err != nil {
					return err
				}
			}
			if mc := ck.Model.Config.Context; ctxLen > mc {
				return fmt.Errorf("--context %d: the model's context is %d", ctxLen, mc)
			}
			if ctxLen > 0 {
				for i, p := range ps {
					if len(p)+n > ctxLen {
						return fmt.Errorf("--context %d cannot hold prompt %d's %d tokens and %d more", ctxLen, i+1, len(p), n)
					}
				}
			}
			r, err := llama.Bind(ck.Model, be)
			if err != nil {
				return err
			}
			defer r.Close()
			if ctxLen > 0 {
				// Longrope's factor set follows the context run with
				// (internal/model/llama/rope.go); Bind took the model's.
				r.UseContext(ctxLen)
			}
			vocab := ck.Model.Config.Vocab
			for i, p := range append(slices.Clone(ps), forced...) {
				for _, t := range p {
					if int(t) >= vocab {
						return fmt.Errorf("line %d: token id %d is outside the vocabulary of %d", i%len(ps)+1, t, vocab)
					}
				}
			}
			for i, p := range ps {
				if err := cmd.Context().Err(); err != nil {
					return err
				}
				var feed []int32
				if forced != nil {
					if len(forced[i]) < n {
						return fmt.Errorf("--follow line %d has %d tokens, --tokens is %d", i+1, len(forced[i]), n)
					}
					feed = forced[i]
				}
				toks, logits, err := greedyLogits(cmd.Context(), r, p, feed, n, vocab)
				if err != nil {
					return fmt.Errorf("prompt %d: %w", i+1, err)
				}
				line := make([]string, len(toks))
				for j, t := range toks {
					line[j] = strconv.Itoa(int(t))
				}
				text := strings.Join(line, " ")
				if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("%d.tokens", i)), []byte(text+"\n"), 0o644); err != nil {
					return err
				}
				b := make([]byte, 0, 4*len(logits))
				for _, v := range logits {
					b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
				}
				if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("%d.logits", i)), b, 0o644); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), text)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "the model (required)")
	f.StringVar(&prompts, "prompts", "", "prompts, one a line, as token ids (required)")
	f.StringVar(&follow, "follow", "", "tokens to feed after each prompt instead of the model's own, one line a prompt")
	f.StringVar(&out, "out", "", "directory for the tokens and logits (required)")
	f.IntVar(&n, "tokens", 32, "tokens to decode after each prompt")
	f.IntVar(&ctxLen, "context", 0, "the context the model runs with, which picks longrope's factors (0: the model's)")
	f.BoolVar(&reference, "reference", false, "run the CPU backend's pure-Go reference kernels (float32 products of the weights' exact values, one thread) instead of --backend")
	for _, name := range []string{"model", "prompts", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// greedyLogits decodes n tokens after prompt: the prompt in one pass, then
// a token a pass; each step's token is feed's when feed is given, else the
// argmax. It returns the argmaxes and the n rows of logits they were
// taken from, or ctx's error when it is cancelled.
func greedyLogits(ctx context.Context, r *llama.Runner, prompt, feed []int32, n, vocab int) ([]int32, []float32, error) {
	if len(prompt) == 0 {
		return nil, nil, errors.New("empty prompt")
	}
	s, err := r.NewState(len(prompt) + n)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	logits := make([]float32, n*vocab)
	toks := make([]int32, n)
	in := prompt
	for k := range n {
		if err := ctx.Err(); err != nil { // Ctrl-C: a step is at most a forward pass
			return nil, nil, err
		}
		row := logits[k*vocab : (k+1)*vocab]
		if err := s.Forward(llama.Chain(in, false), row, nil); err != nil {
			return nil, nil, err
		}
		s.Advance(len(in))
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		toks[k] = int32(best)
		next := toks[k]
		if feed != nil {
			next = feed[k]
		}
		in = []int32{next}
	}
	return toks, logits, nil
}

// readIDLines reads lines of space-separated decimal token ids, skipping
// empty lines.
func readIDLines(path string) ([][]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]int32
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for ln := 1; sc.Scan(); ln++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		ids := make([]int32, len(fields))
		for i, s := range fields {
			v, err := strconv.ParseInt(s, 10, 32)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%s:%d: %q is not a token id", path, ln, s)
			}
			ids[i] = int32(v)
		}
		out = append(out, ids)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no prompts", path)
	}
	return out, nil
}
