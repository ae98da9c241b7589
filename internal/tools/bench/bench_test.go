package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	_ "github.com/seed9b8f47b1/redrafter/internal/backend/cpu" // registers the cpu backend
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

const stories = "../../../models/stories260K/stories260K.gguf"

func TestReadPrompts(t *testing.T) {
	for _, tc := range []struct {
		file      string
		n         int
		id, start string
	}{
		{"mt_bench.jsonl", 2, "question 81", "Compose an engaging travel blog post about a recent trip to Hawaii"},
		{"spec_bench.jsonl", 2, "question 180", "Translate German to English: Haigerloch"},
		{"gsm8k.jsonl", 2, "gsm8k.jsonl:1", "Janet’s ducks lay 16 eggs per day."},
		{"humaneval.jsonl.gz", 2, "HumanEval/0", "from typing import List\n\n\ndef has_close_elements("},
		{"stories.txt", 8, "stories.txt:1", "Once upon a time, there was a little boy named Tom."},
	} {
		ps, err := ReadPrompts(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Errorf("ReadPrompts(%s): %v", tc.file, err)
			continue
		}
		if len(ps) != tc.n || ps[0].ID != tc.id || !strings.HasPrefix(ps[0].Text, tc.start) {
			t.Errorf("ReadPrompts(%s) = %d prompts, first %q %.60q; want %d, %q %.60q", tc.file, len(ps), ps[0].ID, ps[0].Text, tc.n, tc.id, tc.start)
		}
	}
	ps, err := ReadPrompts("testdata/stories.txt")
	if err != nil || !strings.Contains(ps[6].Text, "pond.\nOne day") {
		t.Errorf("stories.txt line 7: %q, %v (want \\n unescaped)", ps[6].Text, err)
	}
	if ps, _ := ReadPrompts("testdata/mt_bench.jsonl"); !strings.HasPrefix(ps[1].Text, "Draft a professional email") {
		t.Errorf("mt_bench record 2 uses %q, want its first turn", ps[1].Text)
	}
}

func TestReadPromptsErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		path, want string
	}{
		{"testdata/no_field.jsonl", "no_field.jsonl:2: the record has no turns, question or prompt field"},
		{"testdata/broken.jsonl", "broken.jsonl:2:"},
		{"testdata/missing.jsonl", "no such file"},
		{"bench.go", "unknown prompt file type"},
		{"testdata/mt_bench.jsonl.gz", "no such file"},
	} {
		if _, err := ReadPrompts(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadPrompts(%s) = %v, want an error containing %q", tc.path, err, tc.want)
		}
	}
	empty := filepath.Join(dir, "empty.jsonl")
	if _, err := ParsePrompts(strings.NewReader("\n\n"), empty); err == nil || !strings.Contains(err.Error(), "has no prompts") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := ReadPrompts("testdata/stories.txt.gz"); err == nil {
		t.Error("missing .gz accepted")
	}
}

func loadEngine(t *testing.T) *redrafter.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1).Save(dir); err != nil {
		t.Fatal(err)
	}
	e, err := redrafter.Load(stories, redrafter.Options{Backend: "cpu", Context: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.LoadDrafter(dir); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRunStories benchmarks the demo model with a random draft head on two
// prompts and checks the report, its JSON and its SVG.
func TestRunStories(t *testing.T) {
	e := loadEngine(t)
	ps, err := ReadPrompts("testdata/stories.txt")
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	cfg := Config{Widths: []int{1, 2}, Lengths: []int{2, 3, 4}, MaxTokens: 24,
		Progress: func(done, total int, what string) { calls = append(calls, what) }}
	r, err := Run(context.Background(), e, ps[:2], cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1+(1+6)*3 || calls[len(calls)-1] != "done" {
		t.Errorf("progress calls: %d (%q ...)", len(calls), calls[:min(3, len(calls))])
	}
	if r.Autoregressive.Tokens != 48 || !(r.Autoregressive.TokensPerSecond > 0) {
		t.Errorf("baseline %+v", r.Autoregressive)
	}
	if len(r.Cells) != 6 || r.Cells[0].W != 1 || r.Cells[0].L != 2 || r.Cells[5].W != 2 || r.Cells[5].L != 4 {
		t.Fatalf("cells %+v", r.Cells)
	}
	for _, c := range r.Cells {
		sum := c.Split.Draft + c.Split.Tree + c.Split.Verify + c.Split.Accept + c.Split.Other
		if c.Tokens != 48 || c.Steps < 24 || c.TokensPerStep < 1 || c.Compression < 1 || !(c.Speedup > 0) ||
			sum < 99.9 || sum > 100.1 || c.MeanPacked < float64(c.L) || c.MeanPacked > float64(1+c.W*(c.L-1)) {
			t.Errorf("cell W=%d L=%d: %+v", c.W, c.L, c)
		}
	}
	if r.Model.Dim != 64 || r.Model.KVCache != "f32" || r.Drafter.HiddenSize != 64 || r.Machine.Threads < 1 || r.Template != "none" || len(r.Prompts) != 2 {
		t.Errorf("report header %+v %+v %+v", r.Model, r.Drafter, r.Machine)
	}

	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"autoregressive  48 tokens", "speedup", "tok/step", "verify%", "f32 KV cache"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	checkJSON(t, r)
	checkSVG(t, r, 6)
}

// checkJSON checks the report's JSON schema: the keys a script reads.
func checkJSON(t *testing.T, r *Report) {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	for _, k := range []string{"date", "machine", "model", "drafter", "prompts", "max_tokens", "template", "greedy", "autoregressive", "redrafter"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	for _, k := range []string{"cpu", "cores", "threads", "backend", "load_before", "load_after"} {
		if _, ok := m["machine"].(map[string]any)[k]; !ok {
			t.Errorf("JSON machine lacks %q", k)
		}
	}
	for _, k := range []string{"tokens", "decode_s", "tokens_per_s"} {
		if _, ok := m["autoregressive"].(map[string]any)[k]; !ok {
			t.Errorf("JSON autoregressive lacks %q", k)
		}
	}
	cells := m["redrafter"].([]any)
	if len(cells) != len(r.Cells) {
		t.Fatalf("JSON has %d cells", len(cells))
	}
	cell := cells[0].(map[string]any)
	for _, k := range []string{"beam_width", "beam_length", "tokens_per_s", "speedup", "tokens_per_step", "compression",
		"mean_packed", "verify_ms_per_step", "accepted_drafts_histogram", "split_percent", "split_ms"} {
		if _, ok := cell[k]; !ok {
			t.Errorf("JSON cell lacks %q", k)
		}
	}
	for _, k := range []string{"draft", "tree", "verify", "accept", "other"} {
		if _, ok := cell["split_percent"].(map[string]any)[k]; !ok {
			t.Errorf("JSON split lacks %q", k)
		}
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Cells[0].Speedup != r.Cells[0].Speedup {
		t.Errorf("JSON does not read back: %v", err)
	}
}

// checkSVG parses the heat map and checks it has a labelled cell per (W, L).
func checkSVG(t *testing.T, r *Report, cells int) {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var texts []string
	titled, root := 0, ""
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b.String())
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Space + " " + el.Name.Local
			}
			inText = el.Name.Local == "text"
			if el.Name.Local == "title" {
				titled++
			}
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(el))
			}
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q", root)
	}
	if titled != cells {
		t.Errorf("%d titled cells, want %d", titled, cells)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"beam length L", "beam width W", "speedup", "tok/step", "Autoregressive baseline"} {
		if !strings.Contains(all, want) {
			t.Errorf("SVG lacks the label %q", want)
		}
	}
	for _, c := range r.Cells {
		if label := c.speedupLabel(); !slices.Contains(texts, label) {
			t.Errorf("SVG lacks the cell label %q", label)
		}
	}
}

// fake decodes canned tokens, so tests can steer the sweep.
func fakeGen(bad func(i int, d redrafter.DraftOptions) bool) generator {
	return func(i, max int, d redrafter.DraftOptions) (*redrafter.Result, error) {
		res := &redrafter.Result{Text: "abc"}
		for k := range max {
			res.Tokens = append(res.Tokens, int32(k+i))
		}
		if bad != nil && bad(i, d) {
			res.Tokens[max/2]++
			res.Text = "abd"
		}
		res.Stats.GeneratedTokens = len(res.Tokens)
		res.Stats.Decode = time.Duration(max) * time.Millisecond
		if !d.Off {
			st := &redrafter.DraftStats{Steps: max / 2, Tokens: max, Packed: max, Beamed: max, Verify: res.Stats.Decode}
			res.Stats.Draft = st
			res.Stats.Decode /= 2
		}
		return res, nil
	}
}

func TestSweepMismatch(t *testing.T) {
	ps := []Prompt{{ID: "first"}, {ID: "second"}}
	cfg := Config{Widths: []int{1, 2}, Lengths: []int{3}, MaxTokens: 10}
	var r Report
	err := r.sweep(context.Background(), ps, cfg, fakeGen(func(i int, d redrafter.DraftOptions) bool { return i == 1 && d.BeamWidth == 2 }))
	var me *MismatchError
	if !errors.As(err, &me) || me.Prompt != "second" || me.W != 2 || me.L != 3 || me.At != 5 {
		t.Fatalf("sweep = %v, want a mismatch on prompt second at W=2 L=3, token 5", err)
	}
	if !strings.Contains(err.Error(), "prompt second") || !strings.Contains(err.Error(), "at token 5") {
		t.Errorf("message %q", err)
	}
	r = Report{}
	if err := r.sweep(context.Background(), ps, cfg, fakeGen(nil)); err != nil {
		t.Fatal(err)
	}
	if c := r.Cell(2, 3); c == nil || c.Speedup < 1.99 || c.Speedup > 2.01 || c.TokensPerStep != 2 || c.Split.Verify != 100 {
		t.Errorf("cell %+v", c)
	}
}

// TestSweepBandwidth: the read bandwidth is measured before and after the
// runs, and decoding is reported as a fraction of their mean.
func TestSweepBandwidth(t *testing.T) {
	ps := []Prompt{{ID: "p"}}
	calls := 0
	cfg := Config{Widths: []int{1}, Lengths: []int{3}, MaxTokens: 10,
		ReadBandwidth: func(context.Context) (float64, error) { calls++; return float64(calls) * 2e9, nil }}
	r := Report{Model: Model{DecodeBytes: 1e6}}
	if err := r.sweep(context.Background(), ps, cfg, fakeGen(nil)); err != nil {
		t.Fatal(err)
	}
	// fakeGen decodes a token a millisecond: 1000 tokens/s × 1 MB = 1 GB/s
	// against (2 + 4) / 2 GB/s.
	if calls != 2 || r.Machine.ReadBandwidth != [2]float64{2e9, 4e9} {
		t.Fatalf("%d calls, bandwidth %v", calls, r.Machine.ReadBandwidth)
	}
	if f := r.Autoregressive.BandwidthFraction; math.Abs(f-1.0/3) > 1e-9 {
		t.Errorf("fraction %v, want 1/3", f)
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2.0 GB/s before the runs, 4.0 GB/s after", "1.0 MB of weights read per token: 1.0 GB/s, 33% of the measured read bandwidth"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	boom := errors.New("boom")
	cfg.ReadBandwidth = func(context.Context) (float64, error) { return 0, boom }
	if err := r.sweep(context.Background(), ps, cfg, fakeGen(nil)); !errors.Is(err, boom) {
		t.Errorf("failing measurement: %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	e := loadEngine(t)
	ps := []Prompt{{ID: "p", Text: "Once"}}
	ok := Config{Widths: []int{1}, Lengths: []int{3}, MaxTokens: 4}
	for _, tc := range []struct {
		mod  func(c *Config)
		ps   []Prompt
		want string
	}{
		{func(c *Config) { c.Widths = []int{0} }, ps, "beam width 0"},
		{func(c *Config) { c.Lengths = []int{1} }, ps, "beam length 1"},
		{func(c *Config) { c.Lengths = nil }, ps, "no beam widths or lengths"},
		{func(c *Config) { c.MaxTokens = 0 }, ps, "max tokens 0"},
		{func(c *Config) { c.Template = "alpaca" }, ps, `unknown chat template "alpaca"`},
		{func(c *Config) {}, nil, "no prompts"},
	} {
		cfg := ok
		tc.mod(&cfg)
		if _, err := Run(context.Background(), e, tc.ps, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want %q", cfg, err, tc.want)
		}
	}
	plain, err := redrafter.Load(stories, redrafter.Options{Backend: "cpu", Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := Run(context.Background(), plain, ps, ok); err == nil || !strings.Contains(err.Error(), "no draft head") {
		t.Errorf("without a head: %v", err)
	}
	// A chat template renders the prompt as a user turn.
	cfg := ok
	cfg.Template = "vicuna"
	if r, err := Run(context.Background(), e, ps, cfg); err != nil || r.Template != "vicuna" {
		t.Errorf("vicuna template: %v", err)
	}
}

func TestColor(t *testing.T) {
	for _, tc := range []struct {
		s    float64
		fill string
	}{{1, "#f7f7f7"}, {2, "#1a9850"}, {8, "#1a9850"}, {0.5, "#d73027"}, {0, "#f7f7f7"}} {
		if fill, _ := color(tc.s, 1); fill != tc.fill {
			t.Errorf("color(%g) = %s, want %s", tc.s, fill, tc.fill)
		}
	}
	for _, tc := range []struct {
		speedups []float64
		span     float64
	}{{[]float64{0.9, 1.5}, 1}, {[]float64{2.63, 1.8}, 1.5}, {[]float64{0.2, 1}, 2.5}} {
		var r Report
		for _, s := range tc.speedups {
			r.Cells = append(r.Cells, Cell{Speedup: s})
		}
		if got := r.colorSpan(); got != tc.span {
			t.Errorf("colorSpan(%v) = %g, want %g", tc.speedups, got, tc.span)
		}
	}
}

func TestMeasurePasses(t *testing.T) {
	e := loadEngine(t)
	ps, err := MeasurePasses(e, []int{2, 1, 5}, 16, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || ps[1].N != 1 || ps[1].Relative != 1 || !(ps[2].MS > 0) || ps[0].N != 2 {
		t.Errorf("passes %+v", ps)
	}
	r := Report{Passes: ps}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil || !strings.Contains(b.String(), "×1 token") || !strings.Contains(b.String(), "after cached") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	if ps, err := MeasurePasses(e, []int{3}, 8, 2); err != nil || ps[0].Relative <= 0 {
		t.Errorf("without a one-token size: %+v, %v", ps, err)
	}
	for _, bad := range [][]int{nil, {0}, {600}} {
		if _, err := MeasurePasses(e, bad, 16, 3); err == nil {
			t.Errorf("MeasurePasses(%v) accepted", bad)
		}
	}
	// The cached prefix: reported, and refused when empty or past the context.
	if ps[0].Cached != 16 {
		t.Errorf("Cached = %d, want 16", ps[0].Cached)
	}
	for _, prefix := range []int{0, e.Context()} {
		if _, err := MeasurePasses(e, []int{1}, prefix, 2); err == nil {
			t.Errorf("a prefix of %d tokens accepted (context %d)", prefix, e.Context())
		}
	}
}
