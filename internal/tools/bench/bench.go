// Package bench measures ReDrafter speculative decoding against
// autoregressive decoding on a prompt set: tokens per second, speedup,
// tokens per step, tree compression and where the time goes, for every beam
// shape W × L, as a table, as JSON and as an SVG heat map of the speedup
// (the ReDrafter paper's Figure 7).
//
// Decoding is greedy, so ReDrafter must produce exactly the autoregressive
// tokens; a difference is an error that names the prompt.
package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/apihooks"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// Config is what to run.
type Config struct {
	Widths, Lengths []int // beam widths W and lengths L to sweep
	MaxTokens       int   // new tokens per prompt
	// Template renders each prompt as a user turn: "" or "none" for raw
	// text, else a tokenizer chat template name (vicuna, llama2, chatml,
	// llama3).
	Template string
	// WarmupTokens is the length of the warm-up runs (0: min(32, MaxTokens)).
	WarmupTokens int
	// Progress, if set, is told about every run before it starts.
	Progress func(done, total int, what string)
	// ReadBandwidth, if set, measures the machine's streaming read
	// bandwidth in bytes per second (redrafter.HostReadBandwidth at the
	// run's thread count, for the CPU backend). Run calls it after the
	// warm-up and after the runs, so that the decode rate can be put as a
	// fraction of what the memory could deliver in the same sitting.
	ReadBandwidth func(context.Context) (float64, error)
}

// Report is the outcome of a benchmark.
type Report struct {
	Date      time.Time `json:"date"`
	Machine   Machine   `json:"machine"`
	Model     Model     `json:"model"`
	Drafter   Drafter   `json:"drafter"`
	Prompts   []string  `json:"prompts"` // IDs
	MaxTokens int       `json:"max_tokens"`
	Template  string    `json:"template"`
	Greedy    bool      `json:"greedy"` // always true: outputs are checked
	// Autoregressive is the baseline, summed over the prompts.
	Autoregressive Baseline `json:"autoregressive"`
	// Cells has one entry per (W, L), widths outer.
	Cells []Cell `json:"redrafter"`
	// Passes, when measured, is the cost of one forward pass by its number
	// of tokens (MeasurePasses).
	Passes []Pass `json:"passes,omitempty"`
}

// Machine describes where the figures were taken.
type Machine struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	Threads   int    `json:"threads"` // GOMAXPROCS
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	GoVersion string `json:"go"`
	Backend   string `json:"backend"`
	// LoadBefore and LoadAfter are the 1, 5 and 15-minute load averages
	// (Linux; zero elsewhere): other work on the machine skews the numbers.
	LoadBefore [3]float64 `json:"load_before"`
	LoadAfter  [3]float64 `json:"load_after"`
	// ReadBandwidth is the streaming read bandwidth measured in the same run
	// (bytes per second), before and after the timed runs; zero when not
	// measured (Config.ReadBandwidth).
	ReadBandwidth [2]float64 `json:"read_bandwidth_bytes_per_s,omitempty"`
}

// Bandwidth is the mean of the read bandwidth measured before and after the
// runs (0 when it was not measured).
func (m Machine) Bandwidth() float64 {
	if m.ReadBandwidth[0] == 0 || m.ReadBandwidth[1] == 0 {
		return 0
	}
	return (m.ReadBandwidth[0] + m.ReadBandwidth[1]) / 2
}

// Model describes the LLM.
type Model struct {
	Path    string `json:"path"`
	Arch    string `json:"arch"`
	Dim     int    `json:"dim"`
	Layers  int    `json:"layers"`
	Heads   int    `json:"heads"`
	KVHeads int    `json:"kv_heads"`
	HeadDim int    `json:"head_dim"`
	FFN     int    `json:"ffn"`
	Vocab   int    `json:"vocab"`
	KVCache string `json:"kv_cache"` // the KV cache's element type: f32 or f16
	// DecodeBytes is what one decode step reads of the weights.
	DecodeBytes int64 `json:"decode_bytes"`
	// InflatedFrom is the original shape of a model padded by redrafter dev
	// inflate (internal/tools/inflate): same function, larger cost, same vocabulary.
	InflatedFrom string `json:"inflated_from,omitempty"`
}

// Drafter describes the draft head.
type Drafter struct {
	Path       string `json:"path"`
	HiddenSize int    `json:"hidden_size"`
	ExitDim    int    `json:"exit_dim"`
	Layers     int    `json:"layers"`
	RNN        bool   `json:"rnn"`
}

// Baseline is autoregressive decoding over all prompts.
type Baseline struct {
	Tokens          int     `json:"tokens"`
	DecodeSeconds   float64 `json:"decode_s"`
	TokensPerSecond float64 `json:"tokens_per_s"`
	// BandwidthFraction is the weight bytes read per second while decoding
	// (TokensPerSecond × Model.DecodeBytes) over the machine's read
	// bandwidth measured in the same run: 1 is the memory's limit. Zero
	// when the bandwidth was not measured.
	BandwidthFraction float64 `json:"bandwidth_fraction,omitempty"`
}

// Cell is ReDrafter at one beam shape, summed over all prompts.
type Cell struct {
	W               int     `json:"beam_width"`
	L               int     `json:"beam_length"`
	Tokens          int     `json:"tokens"`
	DecodeSeconds   float64 `json:"decode_s"`
	TokensPerSecond float64 `json:"tokens_per_s"`
	Speedup         float64 `json:"speedup"` // TokensPerSecond / autoregressive
	Steps           int     `json:"steps"`
	TokensPerStep   float64 `json:"tokens_per_step"`
	Compression     float64 `json:"compression"` // beam tokens per packed token
	MeanPacked      float64 `json:"mean_packed"` // tokens verified per step
	// VerifyPerStepMS is the mean time of one verification forward pass;
	// divided by the autoregressive time per token it is what verifying
	// MeanPacked tokens costs relative to one.
	VerifyPerStepMS float64 `json:"verify_ms_per_step"`
	AcceptHist      []int   `json:"accepted_drafts_histogram"`
	// Device work per step on a backend that counts it (Metal, CUDA): host
	// waits for the GPU, command buffers and kernel dispatches.
	WaitsPerStep          float64 `json:"waits_per_step,omitempty"`
	CommandBuffersPerStep float64 `json:"command_buffers_per_step,omitempty"`
	DispatchesPerStep     float64 `json:"dispatches_per_step,omitempty"`
	Split                 Split   `json:"split_percent"`
	Times                 Split   `json:"split_ms"`
}

// Split is the ReDrafter step's time by phase.
type Split struct {
	Draft  float64 `json:"draft"`
	Tree   float64 `json:"tree"`
	Verify float64 `json:"verify"`
	Accept float64 `json:"accept"`
	Other  float64 `json:"other"`
}

// MSPerToken is the autoregressive time per token.
func (b Baseline) MSPerToken() float64 {
	if b.Tokens == 0 {
		return 0
	}
	return 1000 * b.DecodeSeconds / float64(b.Tokens)
}

// Cell returns the cell for (w, l), or nil.
func (r *Report) Cell(w, l int) *Cell {
	for i := range r.Cells {
		if r.Cells[i].W == w && r.Cells[i].L == l {
			return &r.Cells[i]
		}
	}
	return nil
}

// MismatchError reports ReDrafter output that differs from autoregressive
// decoding.
type MismatchError struct {
	Prompt   string
	W, L     int
	At       int // first differing token
	Want     []int32
	Got      []int32
	WantText string
	GotText  string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("bench: prompt %s: ReDrafter W=%d L=%d differs from autoregressive decoding at token %d of %d/%d:\nautoregressive %q\nredrafter      %q",
		e.Prompt, e.W, e.L, e.At, len(e.Want), len(e.Got), e.WantText, e.GotText)
}

// Run benchmarks e, which must have a draft head, on prompts: one warm-up
// pass over every configuration, then for each prompt autoregressive
// decoding followed by ReDrafter at every (W, L), so that load changes on
// the machine spread over all configurations alike.
func Run(ctx context.Context, e *redrafter.Engine, prompts []Prompt, cfg Config) (*Report, error) {
	hc, ok := e.DraftHead()
	switch {
	case !ok:
		return nil, errors.New("bench: the engine has no draft head")
	case len(prompts) == 0:
		return nil, errors.New("bench: no prompts")
	case len(cfg.Widths) == 0 || len(cfg.Lengths) == 0:
		return nil, errors.New("bench: no beam widths or lengths")
	case cfg.MaxTokens <= 0:
		return nil, fmt.Errorf("bench: max tokens %d must be positive", cfg.MaxTokens)
	}
	for _, w := range cfg.Widths {
		if w < 1 || w > drafter.MaxBeamWidth {
			return nil, fmt.Errorf("bench: beam width %d outside [1, %d]", w, drafter.MaxBeamWidth)
		}
	}
	for _, l := range cfg.Lengths {
		if l < 2 {
			return nil, fmt.Errorf("bench: beam length %d: a beam needs the init token and at least one draft (L >= 2)", l)
		}
	}
	texts := make([]string, len(prompts))
	base := redrafter.GenerateOptions{MaxTokens: cfg.MaxTokens}
	tmpl := cfg.Template
	if tmpl == "" {
		tmpl = "none"
	}
	for i, p := range prompts {
		if tmpl == "none" {
			texts[i] = p.Text
			continue
		}
		s, err := tokenizer.RenderChat(tmpl, []tokenizer.Message{{Role: "user", Content: p.Text}}, true)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		texts[i] = s
		base.ParseSpecial, base.NoBOS = true, tokenizer.TemplateAddsBOS(tmpl)
	}

	c := e.Model()
	r := &Report{
		Date:    time.Now().UTC(),
		Machine: machine(e.Backend()),
		Model: Model{Arch: c.Arch, Dim: c.Dim, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads,
			HeadDim: c.HeadDim, FFN: c.FFN, Vocab: c.Vocab, KVCache: c.KVCache, DecodeBytes: apihooks.DecodeBytes(e)},
		Drafter: Drafter{HiddenSize: hc.HiddenSize, ExitDim: hc.ExitDim, Layers: hc.Layers, RNN: hc.RNN},
	}
	s, err := e.NewSession()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	gen := func(i, max int, draft redrafter.DraftOptions) (*redrafter.Result, error) {
		o := base
		o.MaxTokens, o.Draft = max, draft
		return s.Generate(ctx, texts[i], o, nil)
	}
	if err := r.sweep(ctx, prompts, cfg, gen); err != nil {
		return nil, err
	}
	r.Template = tmpl
	return r, nil
}

// generator decodes prompt i for up to max tokens, greedily.
type generator func(i, max int, draft redrafter.DraftOptions) (*redrafter.Result, error)

// sweep runs the warm-up and the measurements and fills r.
func (r *Report) sweep(ctx context.Context, prompts []Prompt, cfg Config, gen generator) error {
	r.MaxTokens, r.Greedy = cfg.MaxTokens, true
	for _, p := range prompts {
		r.Prompts = append(r.Prompts, p.ID)
	}
	type acc struct {
		tokens int
		decode time.Duration
		st     redrafter.DraftStats
	}
	cells := make([]acc, len(cfg.Widths)*len(cfg.Lengths))
	total := (1 + len(cells)) * (len(prompts) + 1)
	if cfg.ReadBandwidth != nil {
		total += 2
	}
	done := 0
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(done, total, fmt.Sprintf(format, args...))
		}
		done++
	}

	// Warm-up: page the weights in and compile the plans of every shape.
	warm := cfg.WarmupTokens
	if warm <= 0 {
		warm = min(32, cfg.MaxTokens)
	}
	progress("warm-up: autoregressive")
	if _, err := gen(0, warm, redrafter.DraftOptions{Off: true}); err != nil {
		return err
	}
	for _, w := range cfg.Widths {
		for _, l := range cfg.Lengths {
			progress("warm-up: W=%d L=%d", w, l)
			if _, err := gen(0, warm, redrafter.DraftOptions{BeamWidth: w, BeamLength: l}); err != nil {
				return err
			}
		}
	}
	if cfg.ReadBandwidth != nil {
		progress("read bandwidth")
		bw, err := cfg.ReadBandwidth(ctx)
		if err != nil {
			return fmt.Errorf("bench: read bandwidth: %w", err)
		}
		r.Machine.ReadBandwidth[0] = bw
	}
	r.Machine.LoadBefore = loadAvg()

	for i, p := range prompts {
		progress("prompt %d/%d (%s): autoregressive", i+1, len(prompts), p.ID)
		ref, err := gen(i, cfg.MaxTokens, redrafter.DraftOptions{Off: true})
		if err != nil {
			return fmt.Errorf("bench: prompt %s: %w", p.ID, err)
		}
		r.Autoregressive.Tokens += ref.Stats.GeneratedTokens
		r.Autoregressive.DecodeSeconds += ref.Stats.Decode.Seconds()
		k := 0
		for _, w := range cfg.Widths {
			for _, l := range cfg.Lengths {
				progress("prompt %d/%d (%s): W=%d L=%d", i+1, len(prompts), p.ID, w, l)
				res, err := gen(i, cfg.MaxTokens, redrafter.DraftOptions{BeamWidth: w, BeamLength: l})
				if err != nil {
					return fmt.Errorf("bench: prompt %s: W=%d L=%d: %w", p.ID, w, l, err)
				}
				if !slices.Equal(res.Tokens, ref.Tokens) {
					at := 0
					for at < min(len(res.Tokens), len(ref.Tokens)) && res.Tokens[at] == ref.Tokens[at] {
						at++
					}
					return &MismatchError{Prompt: p.ID, W: w, L: l, At: at, Want: ref.Tokens, Got: res.Tokens,
						WantText: ref.Text, GotText: res.Text}
				}
				a := &cells[k]
				k++
				a.tokens += res.Stats.GeneratedTokens
				a.decode += res.Stats.Decode
				if st := res.Stats.Draft; st != nil {
					addStats(&a.st, st)
				}
			}
		}
	}
	r.Machine.LoadAfter = loadAvg()
	if cfg.ReadBandwidth != nil {
		progress("read bandwidth")
		bw, err := cfg.ReadBandwidth(ctx)
		if err != nil {
			return fmt.Errorf("bench: read bandwidth: %w", err)
		}
		r.Machine.ReadBandwidth[1] = bw
	}
	if cfg.Progress != nil {
		cfg.Progress(total, total, "done")
	}

	ar := &r.Autoregressive
	ar.TokensPerSecond = rate(ar.Tokens, ar.DecodeSeconds)
	if bw := r.Machine.Bandwidth(); bw > 0 {
		ar.BandwidthFraction = ar.TokensPerSecond * float64(r.Model.DecodeBytes) / bw
	}
	k := 0
	for _, w := range cfg.Widths {
		for _, l := range cfg.Lengths {
			a := cells[k]
			k++
			st := &a.st
			cell := Cell{W: w, L: l, Tokens: a.tokens, DecodeSeconds: a.decode.Seconds(),
				Steps: st.Steps, TokensPerStep: st.TokensPerStep(), Compression: st.Compression(), AcceptHist: st.AcceptHist}
			cell.TokensPerSecond = rate(a.tokens, cell.DecodeSeconds)
			if ar.TokensPerSecond > 0 {
				cell.Speedup = cell.TokensPerSecond / ar.TokensPerSecond
			}
			if st.Steps > 0 {
				cell.MeanPacked = float64(st.Packed) / float64(st.Steps)
				cell.VerifyPerStepMS = ms(st.Verify) / float64(st.Steps)
				cell.WaitsPerStep, cell.DispatchesPerStep, cell.CommandBuffersPerStep = st.PerStep()
			}
			cell.Times = Split{ms(st.Draft), ms(st.Tree), ms(st.Verify), ms(st.Accept), ms(st.Other)}
			if tot := st.Total(); tot > 0 {
				pc := func(d time.Duration) float64 { return 100 * float64(d) / float64(tot) }
				cell.Split = Split{pc(st.Draft), pc(st.Tree), pc(st.Verify), pc(st.Accept), pc(st.Other)}
			}
			r.Cells = append(r.Cells, cell)
		}
	}
	return nil
}

// addStats sums one generation's ledger into a.
func addStats(a, s *redrafter.DraftStats) {
	a.Steps += s.Steps
	a.Tokens += s.Tokens
	a.Packed += s.Packed
	a.Beamed += s.Beamed
	a.Draft += s.Draft
	a.Tree += s.Tree
	a.Verify += s.Verify
	a.Accept += s.Accept
	a.Other += s.Other
	a.Device.Waits += s.Device.Waits
	a.Device.Dispatches += s.Device.Dispatches
	a.Device.CommandBuffers += s.Device.CommandBuffers
	for len(a.AcceptHist) < len(s.AcceptHist) {
		a.AcceptHist = append(a.AcceptHist, 0)
		a.AcceptedAtDepth = append(a.AcceptedAtDepth, 0)
	}
	for i := range s.AcceptHist {
		a.AcceptHist[i] += s.AcceptHist[i]
		a.AcceptedAtDepth[i] += s.AcceptedAtDepth[i]
	}
}

func rate(n int, s float64) float64 {
	if s <= 0 {
		return 0
	}
	return float64(n) / s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func machine(backend string) Machine {
	return Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Threads: runtime.GOMAXPROCS(0),
		OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version(), Backend: backend}
}
