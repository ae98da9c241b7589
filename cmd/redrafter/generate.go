package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
)

// modelFlags are the flags of commands that load a model and generate.
type modelFlags struct {
	model       string
	context     int
	kvCache     string
	maxTokens   int
	temperature float32
	topK        int
	topP        float32
	seed        int64
	stops       []string
	drafter     string
	beamWidth   int
	beamLength  int
	accept      string

	cmd *cobra.Command // to ask which flags were given
}

func (m *modelFlags) register(cmd *cobra.Command) {
	m.cmd = cmd
	f := cmd.Flags()
	f.StringVarP(&m.model, "model", "m", "", "model: a .gguf file, an HF checkpoint directory, or a Hugging Face repository REPO[:TAG] (pulled into the hub cache if not there) (required)")
	f.IntVar(&m.context, "context", 0, "maximum tokens in the context, at most the model's (0: the model's)")
	f.StringVar(&m.kvCache, "kv-cache", "", "KV cache element type: f32, or f16 for half the memory (keys and values rounded to halves); default f16 on a GPU, f32 on the CPU")
	f.IntVarP(&m.maxTokens, "max-tokens", "n", 256, "stop after this many new tokens (0: until the context is full)")
	f.Float32Var(&m.temperature, "temperature", 0, "sampling temperature, also --temp (0: greedy)")
	// --temp is llama.cpp's and mlx-lm's name; both set one value.
	f.Float32Var(&m.temperature, "temp", 0, "alias of --temperature")
	_ = f.MarkHidden("temp")
	f.IntVar(&m.topK, "top-k", 0, "sample from the k most likely tokens only (0: all)")
	f.Float32Var(&m.topP, "top-p", 1, "sample from the smallest set of tokens with this much probability (0: the most probable token only)")
	f.Int64Var(&m.seed, "seed", -1, "random seed for sampling (-1: a fresh one each run, shown by --stats and --json)")
	f.StringArrayVar(&m.stops, "stop", nil, "stop before this text (repeatable)")
	f.StringVar(&m.drafter, "drafter", "", "ReDrafter draft head: a directory (config.json + model.safetensors), a Hugging Face repository, or auto (a cached head whose config names the model as its base): speculative decoding")
	f.IntVar(&m.beamWidth, "beam-width", 0, "ReDrafter beams per step, 1-50 (0: the backend's default; needs --drafter)")
	f.IntVar(&m.beamLength, "beam-length", 0, "ReDrafter tokens per beam including the last accepted one, >= 2 (0: the backend's default; needs --drafter)")
	f.StringVar(&m.accept, "accept", string(redrafter.AcceptExact), "ReDrafter acceptance when sampling: exact (keeps the model's distribution) or apple (the reference rule, biased; needs --drafter)")
	_ = cmd.MarkFlagRequired("model")
}

// options checks the flags and returns the generation options; a sampled
// run with no --seed gets a random seed, which opt.Seed holds.
func (m *modelFlags) options() (redrafter.GenerateOptions, error) {
	t := float64(m.temperature)
	switch {
	case m.maxTokens < 0:
		return redrafter.GenerateOptions{}, errors.New("--max-tokens must not be negative")
	case math.IsNaN(t) || math.IsInf(t, 0) || t < 0:
		return redrafter.GenerateOptions{}, fmt.Errorf("--temperature %v: want a number >= 0 (0: greedy)", m.temperature)
	case m.topK < 0:
		return redrafter.GenerateOptions{}, errors.New("--top-k must not be negative")
	case !(m.topP >= 0 && m.topP <= 1):
		return redrafter.GenerateOptions{}, errors.New("--top-p must be in [0, 1] (0: the most probable token only; 1: all tokens)")
	case m.context < 0:
		return redrafter.GenerateOptions{}, fmt.Errorf("--context %d: want a positive number of tokens, or 0 for the model's context", m.context)
	case redrafter.AcceptanceRule(m.accept) != redrafter.AcceptExact && redrafter.AcceptanceRule(m.accept) != redrafter.AcceptApple:
		return redrafter.GenerateOptions{}, fmt.Errorf("--accept %q: want %s or %s", m.accept, redrafter.AcceptExact, redrafter.AcceptApple)
	}
	seed := uint64(m.seed)
	if m.seed < 0 {
		seed = randomSeed()
	}
	return redrafter.GenerateOptions{
		MaxTokens: m.maxTokens,
		Sampling:  redrafter.Sampling{Temperature: m.temperature, TopK: m.topK, TopP: m.topP, TopPSet: true},
		Seed:      seed,
		Stop:      m.stops,
		Draft:     redrafter.DraftOptions{BeamWidth: m.beamWidth, BeamLength: m.beamLength, Accept: redrafter.AcceptanceRule(m.accept)},
	}, nil
}

// modelSampling fills in the sampling the model's generation_config.json
// recommends (Engine.DefaultSampling) for each of --temperature, --top-k
// and --top-p the user did not give.
func (m *modelFlags) modelSampling(e *redrafter.Engine, opt *redrafter.GenerateOptions) {
	d, ok := e.DefaultSampling()
	if !ok || m.cmd == nil {
		return
	}
	f := m.cmd.Flags()
	if !f.Changed("temperature") && !f.Changed("temp") {
		opt.Sampling.Temperature = d.Temperature
	}
	if !f.Changed("top-k") {
		opt.Sampling.TopK = d.TopK
	}
	if !f.Changed("top-p") {
		opt.Sampling.TopP, opt.Sampling.TopPSet = d.TopP, d.TopPSet
	}
}

// warnUnused says on stderr which given flags have no effect without
// --drafter: a run that silently ignores them measures something else
// than the user thinks.
func (m *modelFlags) warnUnused(w io.Writer) {
	if m.drafter != "" || m.cmd == nil {
		return
	}
	for _, name := range []string{"beam-width", "beam-length", "accept"} {
		if m.cmd.Flags().Changed(name) {
			fmt.Fprintf(w, "redrafter: warning: --%s has no effect without --drafter\n", name)
		}
	}
}

func (m *modelFlags) load(g *globalFlags) (*redrafter.Engine, error) {
	if err := resolveModelPath(m.cmd, "--model", &m.model); err != nil {
		return nil, err
	}
	if err := resolveDrafterPath(m.cmd, &m.drafter, m.model); err != nil {
		return nil, err
	}
	e, err := redrafter.Load(m.model, redrafter.Options{Backend: g.backend, Context: m.context, KVCache: m.kvCache})
	if err != nil {
		return nil, err
	}
	if max := e.Model().TrainedContext; m.context > max {
		e.Close()
		return nil, fmt.Errorf("--context %d: the model holds at most %d tokens (pass 0 for all of them)", m.context, max)
	}
	if m.drafter != "" {
		if err := e.LoadDrafter(m.drafter); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// readPrompt returns the prompt of generate: --prompt, --prompt-file (-
// is stdin), or stdin when it is a pipe or a file and neither flag is
// given, as `echo text | redrafter generate -m model` expects.
func readPrompt(cmd *cobra.Command, prompt, promptFile string) (string, error) {
	given := cmd.Flags().Changed("prompt")
	switch {
	case given && promptFile != "":
		return "", errors.New("give --prompt or --prompt-file, not both")
	case given:
		return prompt, nil
	case promptFile == "-":
		b, err := readBounded(cmd.InOrStdin())
		if err != nil {
			return "", fmt.Errorf("--prompt-file -: reading stdin: %w", err)
		}
		return trimNewline(string(b)), nil
	case promptFile != "":
		b, err := readPromptFile(promptFile)
		if err != nil {
			return "", fmt.Errorf("--prompt-file %s: %w", promptFile, err)
		}
		return string(b), nil
	case stdinPiped(cmd.InOrStdin()):
		b, err := readBounded(cmd.InOrStdin())
		if err != nil {
			return "", fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		return trimNewline(string(b)), nil
	}
	return "", nil
}

// maxPromptBytes bounds a prompt read from a file or stdin: far more text
// than any context holds, and a stream that never ends (/dev/zero, yes |)
// stops there instead of growing without bound.
const maxPromptBytes = 64 << 20

// errPromptTooLong is a prompt over maxPromptBytes.
var errPromptTooLong = fmt.Errorf("longer than %d MiB: a prompt is at most that", maxPromptBytes>>20)

// readBounded reads r to its end, or fails past maxPromptBytes.
func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxPromptBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPromptBytes {
		return nil, errPromptTooLong
	}
	return b, nil
}

// readPromptFile reads a prompt file: a regular file, or a named pipe (a
// shell's <(command)), bounded as stdin is. Devices, sockets and
// directories are refused before reading (/dev/zero never ends).
func readPromptFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, plainErr(err)
	}
	switch m := st.Mode(); {
	case m.IsDir():
		return nil, errors.New("a directory, not a text file")
	case !m.IsRegular() && m&os.ModeNamedPipe == 0:
		return nil, fmt.Errorf("not a text file (it is a %s)", fileKind(m))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, plainErr(err)
	}
	defer f.Close()
	return readBounded(f)
}

// trimNewline drops the one newline that echo and a here-string end
// their text with: the prompt is the line, not the line and a newline.
func trimNewline(s string) string {
	s = strings.TrimSuffix(s, "\n")
	return strings.TrimSuffix(s, "\r")
}

// stdinPiped reports whether r is a pipe or a regular file (not a
// terminal or /dev/null); a reader that is not a file (a test's) counts.
func stdinPiped(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return true
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	return st.Mode()&os.ModeNamedPipe != 0 || st.Mode().IsRegular()
}

func newGenerateCmd(g *globalFlags) *cobra.Command {
	var (
		m          modelFlags
		prompt     string
		promptFile string
		stats      bool
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "generate -m PATH [-p TEXT | --prompt-file FILE|-]",
		Short: "Generate a continuation of a prompt",
		Long: `Generate a continuation of a prompt and stream it to stdout. The prompt is
--prompt, or the contents of --prompt-file (- for stdin), or stdin when it is
piped and neither is given (one trailing newline dropped). Ctrl-C stops the generation, ends the line,
prints the stats so far (--stats) and exits with status 130.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := readPrompt(cmd, prompt, promptFile)
			if err != nil {
				return err
			}
			opt, err := m.options()
			if err != nil {
				return err
			}
			m.warnUnused(cmd.ErrOrStderr())
			e, err := m.load(g)
			if err != nil {
				return err
			}
			defer e.Close()
			m.modelSampling(e, &opt)
			out := cmd.OutOrStdout()
			stream := func(s string) error {
				_, err := fmt.Fprint(out, s)
				return err
			}
			if asJSON {
				stream = nil
			}
			res, err := e.Generate(cmd.Context(), text, opt, stream)
			// On Ctrl-C the result so far, when the library returns one, is
			// reported as a finished one is; the error follows (exit 130).
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			if res == nil {
				if !asJSON {
					fmt.Fprintln(out)
				}
				return err
			}
			if asJSON {
				j := jsonResult(res, e)
				j.Stats.Seed = opt.Seed
				if jerr := json.NewEncoder(out).Encode(j); jerr != nil {
					return jerr
				}
				return err
			}
			fmt.Fprintln(out)
			if stats {
				printStats(cmd.ErrOrStderr(), res, e)
				printSeed(cmd.ErrOrStderr(), opt)
			}
			return err
		},
	}
	m.register(cmd)
	f := cmd.Flags()
	f.StringVarP(&prompt, "prompt", "p", "", "prompt text (default: stdin when piped, else empty: the model starts from BOS)")
	f.StringVar(&promptFile, "prompt-file", "", "read the prompt from this file (-: stdin)")
	f.BoolVar(&stats, "stats", false, "print token counts, speeds and the seed to stderr")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with text, tokens and stats (the seed too) to stdout")
	return cmd
}
