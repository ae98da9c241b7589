package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	_ "github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

const stories = "../../../models/stories260K/stories260K.gguf"

var storyPrompts = []string{"Once upon a time", "One day, Tom", "Lily and her mom", "The little dog", "Ben had a red ball",
	"There was a big tree", "Sue liked to sing", "The sun was hot"}

func load(t testing.TB) *redrafter.Engine {
	t.Helper()
	e, err := redrafter.Load(stories, redrafter.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func distill(t *testing.T, e *redrafter.Engine, dir string, o DistillOptions) DistillProgress {
	t.Helper()
	p, err := Distill(context.Background(), e, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDistillResume(t *testing.T) {
	e := load(t)
	opts := DistillOptions{Prompts: storyPrompts[:5], MaxTokens: 24, Temperature: 1, SamplesPerPrompt: 2, Seed: 7, Batch: 3}
	whole := t.TempDir()
	if p := distill(t, e, whole, opts); p.Done != 10 || p.Resumed != 0 {
		t.Fatalf("first run: %+v", p)
	}

	// Interrupt a run after 4 continuations, then rerun it.
	parts := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	o := opts
	o.Progress = func(p DistillProgress) {
		if p.Done == 4 {
			cancel()
		}
	}
	if _, err := Distill(ctx, e, parts, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: err = %v, want context.Canceled", err)
	}
	set, err := ReadSet(parts)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Records) < 4 {
		t.Fatalf("an interrupted run kept %d continuations, want the 4 it made", len(set.Records))
	}
	p := distill(t, e, parts, opts)
	if p.Resumed != len(set.Records) || p.Done != 10-len(set.Records) {
		t.Errorf("resumed run: %+v after %d kept", p, len(set.Records))
	}
	if p := distill(t, e, parts, opts); p.Done != 0 || p.Resumed != 10 {
		t.Errorf("a rerun of a finished set made %d continuations", p.Done)
	}

	a, err := ReadSet(whole)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadSet(parts)
	if err != nil {
		t.Fatal(err)
	}
	key := func(r Record) int { return r.Prompt*100 + r.Sample }
	sortRecs := func(rs []Record) {
		slices.SortFunc(rs, func(x, y Record) int { return key(x) - key(y) })
	}
	sortRecs(a.Records)
	sortRecs(b.Records)
	if !reflect.DeepEqual(a.Records, b.Records) {
		t.Errorf("interrupted and resumed distillation differs from an uninterrupted one")
	}
	for _, r := range a.Records {
		if ids := e.Tokenizer().Encode(storyPrompts[r.Prompt], true); !slices.Equal(ids, r.Tokens[:r.PromptLen]) {
			t.Errorf("record %d/%d: prompt tokens %v, want %v", r.Prompt, r.Sample, r.Tokens[:r.PromptLen], ids)
		}
	}
	if slices.Equal(a.Records[0].Tokens, a.Records[1].Tokens) {
		t.Errorf("two samples of prompt 0 at temperature 1 are identical")
	}

	// Other settings, or another prompt file, are refused.
	o = opts
	o.MaxTokens = 30
	if _, err := Distill(context.Background(), e, parts, o); err == nil || !strings.Contains(err.Error(), "max_tokens 24 (now 30)") {
		t.Errorf("resuming with another --max-tokens: err = %v", err)
	}
	o = opts
	o.Prompts = storyPrompts[3:8]
	if _, err := Distill(context.Background(), e, parts, o); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Errorf("resuming with other prompts: err = %v", err)
	}
	o = opts
	o.Temperature = 0
	if _, err := Distill(context.Background(), e, t.TempDir(), o); err == nil {
		t.Errorf("greedy with 2 samples per prompt: no error")
	}
}

// greedySet distills storyPrompts greedily into a temporary directory.
func greedySet(t *testing.T, e *redrafter.Engine, prompts []string, tokens int) *Set {
	t.Helper()
	dir := t.TempDir()
	distill(t, e, dir, DistillOptions{Prompts: prompts, MaxTokens: tokens, SamplesPerPrompt: 1})
	set, err := ReadSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestDistillSpeculative checks that greedy distillation with the draft head
// writes exactly the autoregressive continuations, for several beam shapes,
// and that it refuses sampling and an engine without a head.
func TestDistillSpeculative(t *testing.T) {
	e := load(t)
	opts := DistillOptions{Prompts: storyPrompts, MaxTokens: 40, SamplesPerPrompt: 1}
	plain := t.TempDir()
	if p := distill(t, e, plain, opts); p.Steps != p.Tokens {
		t.Errorf("autoregressive distillation: %d steps for %d tokens", p.Steps, p.Tokens)
	}
	want, err := ReadSet(plain)
	if err != nil {
		t.Fatal(err)
	}

	o := opts
	o.Speculative = true
	if _, err := Distill(context.Background(), e, t.TempDir(), o); err == nil || !strings.Contains(err.Error(), "draft head") {
		t.Errorf("speculative without a head: %v", err)
	}
	if err := e.LoadDrafter("../../../models/stories260K/drafter"); err != nil {
		t.Fatal(err)
	}
	for _, beam := range [][2]int{{0, 0}, {1, 5}, {3, 4}} {
		o.BeamWidth, o.BeamLength = beam[0], beam[1]
		dir := t.TempDir()
		p := distill(t, e, dir, o)
		if p.Steps >= p.Tokens*3/4 {
			t.Errorf("beam %v: %d steps for %d tokens: did it draft?", beam, p.Steps, p.Tokens)
		}
		got, err := ReadSet(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Records, want.Records) || !reflect.DeepEqual(got.Meta, want.Meta) {
			t.Errorf("beam %v: speculative distillation differs from autoregressive", beam)
		}
	}
	o.Temperature = 0.8
	if _, err := Distill(context.Background(), e, t.TempDir(), o); err == nil || !strings.Contains(err.Error(), "greedy only") {
		t.Errorf("speculative sampling: %v", err)
	}
}

func TestTrainEndToEnd(t *testing.T) {
	e := load(t)
	data := greedySet(t, e, storyPrompts[:6], 64)
	held := greedySet(t, e, storyPrompts[6:], 64)
	out := t.TempDir()
	var evals []Eval
	var phases []string
	rep, err := Train(context.Background(), e, Options{Data: data, EvalData: held, Out: out, Steps: 60, Batch: 64,
		LR: 1e-2, Layers: 1, EvalEvery: 20, SaveEvery: 30, KLWeight: 0.5, Seed: 3,
		Progress: func(p Progress) {
			if p.Eval != nil && (len(evals) == 0 || evals[len(evals)-1].Step != p.Eval.Step) {
				evals = append(evals, *p.Eval)
			}
			if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
				phases = append(phases, p.Phase)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(phases, []string{"context", "train"}) {
		t.Errorf("progress phases %v", phases)
	}
	if rep.TeacherAgreement < 0.99 {
		t.Errorf("greedy data agrees with the model's argmax at %.3f of tokens: hidden states and tokens are misaligned", rep.TeacherAgreement)
	}
	if len(evals) != 3 {
		t.Fatalf("evaluations at %v, want steps 20, 40, 60", evals)
	}
	if !(evals[2].Loss < evals[0].Loss) || evals[2].Acc[0] <= evals[0].Acc[0] {
		t.Errorf("held-out loss did not fall: %v", evals)
	}
	if len(evals[2].Acc) != 5 {
		t.Errorf("accuracy for %d positions, want 5", len(evals[2].Acc))
	}

	// The checkpoint loads and drafts; greedy output is the model's own.
	h, err := drafter.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := e.LoadDrafter(out); err != nil {
		t.Fatal(err)
	}
	m := NewMeasurer(e, []string{"Once upon a time", "Tim and Sam"}, 48)
	r, err := m.Measure(context.Background(), 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mismatches != 0 {
		t.Errorf("greedy decoding with the trained head differs from autoregressive decoding: %s", r)
	}
	if r.TokensPerStep <= 1 {
		t.Errorf("the trained head never drafts an accepted token: %s", r)
	}

	// A second run into the same directory needs Resume.
	if _, err := Train(context.Background(), e, Options{Data: data, EvalData: held, Out: out, Steps: 60, Batch: 64}); !errors.Is(err, ErrStateExists) ||
		strings.Contains(err.Error(), "--") {
		t.Errorf("training over a checkpoint without Resume: err = %v", err)
	}
}

func TestTrainResume(t *testing.T) {
	e := load(t)
	data := greedySet(t, e, storyPrompts, 40)
	opts := Options{Data: data, Holdout: 0.3, Steps: 12, Batch: 32, LR: 3e-3, Layers: 1, EvalEvery: 4, SaveEvery: 4, Seed: 5}

	straight := opts
	straight.Out = t.TempDir()
	if _, err := Train(context.Background(), e, straight); err != nil {
		t.Fatal(err)
	}

	// Stop after step 6 (the checkpoint at step 4 survives), then resume.
	split := opts
	split.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	split.Progress = func(p Progress) {
		if p.Phase == "train" && p.Done == 6 {
			cancel()
		}
	}
	if _, err := Train(ctx, e, split); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted training: err = %v", err)
	}
	split.Progress = nil
	split.Resume = true
	rep, err := Train(context.Background(), e, split)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ResumedFrom != 4 || rep.Steps != 12 {
		t.Errorf("resumed from %d to %d, want 4 to 12", rep.ResumedFrom, rep.Steps)
	}
	a, _ := readState(straight.Out)
	b, _ := readState(split.Out)
	for i, ta := range a.Params.List {
		if !slices.Equal(ta.Data, b.Params.List[i].Data) {
			t.Errorf("%s differs between an uninterrupted run and a resumed one", ta.Name)
		}
	}
	for _, name := range []string{"config.json", "model.safetensors", StateFile} {
		x, _ := os.ReadFile(filepath.Join(straight.Out, name))
		y, _ := os.ReadFile(filepath.Join(split.Out, name))
		if len(x) == 0 || !slices.Equal(x, y) {
			t.Errorf("%s differs between an uninterrupted run and a resumed one", name)
		}
	}

	// Resuming with another schedule is refused.
	other := split
	other.LR = 1e-3
	if _, err := Train(context.Background(), e, other); err == nil || !strings.Contains(err.Error(), "lr 0.003 (now 0.001)") {
		t.Errorf("resuming with another learning rate: err = %v", err)
	}
}

func TestSchedule(t *testing.T) {
	for _, tc := range []struct {
		s, n, warm int
		want       float64
	}{
		{0, 100, 10, 0.1}, {9, 100, 10, 1}, {10, 100, 10, 1}, {55, 100, 10, 0.5}, {100, 100, 10, 0}, {0, 10, 0, 1},
	} {
		if got := schedule(1, tc.s, tc.n, tc.warm); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("schedule(1, %d, %d, %d) = %g, want %g", tc.s, tc.n, tc.warm, got, tc.want)
		}
	}
}

func TestAdamWAndClipping(t *testing.T) {
	c := drafter.Config{VocabSize: 3, HiddenSize: 1, NumDraftLayers: 1, RNN: true}
	p, g := NewParams(c), NewParams(c)
	for _, tt := range g.List {
		for i := range tt.Data {
			tt.Data[i] = 3
		}
	}
	n := g.Count()
	if norm := clipNorm(g, 1); math.Abs(norm-3*math.Sqrt(float64(n))) > 1e-4 {
		t.Errorf("clipNorm: norm %g, want %g", norm, 3*math.Sqrt(float64(n)))
	}
	if norm := clipNorm(g, 0); math.Abs(norm-1) > 1e-4 {
		t.Errorf("after clipping to 1 the norm is %g", norm)
	}
	// The first AdamW step moves every weight by -lr·sign(g) (bias-corrected
	// moments, eps negligible), plus decay on matrices only.
	p.RnnW.Data[0], p.RnnB.Data[0] = 2, 2
	o := newAdamW(p, 0.1)
	o.update(p, g, 0.01)
	if got, want := p.RnnW.Data[0], float32(2*(1-0.01*0.1)-0.01); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("AdamW step on a matrix: %g, want %g", got, want)
	}
	if got, want := p.RnnB.Data[0], float32(2-0.01); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("AdamW step on a bias: %g, want %g", got, want)
	}
}

func TestReadPrompts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name, text string
		want       []string
		err        string
	}{
		{"a.txt", "Once upon a time\n\nTwo\\nlines\n", []string{"Once upon a time", "Two\nlines"}, ""},
		{"b.jsonl", `{"turns": ["first", "second"]}` + "\n" + `{"question": "q"}` + "\n" + `{"prompt": "def f():"}` + "\n",
			[]string{"first", "q", "def f():"}, ""},
		{"c.jsonl", `{"answer": 1}` + "\n", nil, `c.jsonl:1: no "turns", "question" or "prompt"`},
		{"d.jsonl", "{\n", nil, "d.jsonl:1:"},
		{"e.txt", "\n\n", nil, "no prompts"},
	} {
		got, err := ReadPrompts(write(tc.name, tc.text))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ReadPrompts(%s) error = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ReadPrompts(%s) = %q, %v, want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := ReadPrompts(filepath.Join(dir, "missing.txt")); err == nil {
		t.Errorf("ReadPrompts of a missing file: no error")
	}
}

func TestReadSetErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadSet(dir); err == nil || !strings.Contains(err.Error(), "not a distillation set") {
		t.Errorf("ReadSet of an empty directory: %v", err)
	}
	os.WriteFile(filepath.Join(dir, metaFile), []byte(`{"format":"`+Format+`","vocab_size":10,"hidden_size":4}`), 0o644)
	for _, tc := range []struct{ line, err string }{
		{`{"prompt":0,"prompt_len":1,"tokens":[1,10]}`, "token 10 outside the vocabulary of 10"},
		{`{"prompt":0,"prompt_len":3,"tokens":[1,2]}`, "prompt_len 3 for 2 tokens"},
		{`{"prompt":0,`, "shard-00000.jsonl:1"},
	} {
		os.WriteFile(filepath.Join(dir, shardName(0)), []byte(tc.line+"\n"), 0o644)
		if _, err := ReadSet(dir); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ReadSet with %s: error %v, want %q", tc.line, err, tc.err)
		}
	}
}

func TestParamsRoundTrip(t *testing.T) {
	for _, c := range []drafter.Config{
		{VocabSize: 7, HiddenSize: 3, NumDraftLayers: 2, RNN: true},
		{VocabSize: 7, HiddenSize: 3, ExitDim: 5, NumDraftLayers: 1, RNN: true},
		{VocabSize: 7, HiddenSize: 3, NumDraftLayers: 1},
	} {
		p, err := FromHead(drafter.NewRandom(c, 9))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := p.Head().Save(dir); err != nil {
			t.Fatal(err)
		}
		h, err := drafter.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		q, err := FromHead(h)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, tt := range p.List {
			if !slices.Equal(tt.Data, q.List[i].Data) {
				t.Errorf("%+v: %s changed through Save and Load", c, tt.Name)
			}
		}
	}
}

// The bundled demo head keeps the bar on held-out openings: at least
// 3 tokens per step at W=4, L=5 (greedy), with the model's own output.
func TestDemoHead(t *testing.T) {
	e := load(t)
	if err := e.LoadDrafter("../../../models/stories260K/drafter"); err != nil {
		t.Fatal(err)
	}
	prompts, err := ReadPrompts("../../../models/stories260K/distill/prompts-heldout.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewMeasurer(e, prompts[:12], 128).Measure(context.Background(), 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if r.Mismatches != 0 || r.TokensPerStep < 3 {
		t.Errorf("demo head on 12 held-out openings: %s; want 0 differences and >= 3 tokens/step", r)
	}
}

// --init starts from a trained head: one step at a tiny learning rate
// leaves the demo head's held-out accuracy (~0.85 at the first position),
// where random weights start near chance; a head of another shape is
// refused with the reason.
func TestTrainInit(t *testing.T) {
	e := load(t)
	data := greedySet(t, e, storyPrompts[:6], 48)
	held := greedySet(t, e, storyPrompts[6:], 48)
	const demo = "../../../models/stories260K/drafter"
	first := func(init string) float64 {
		t.Helper()
		rep, err := Train(context.Background(), e, Options{Data: data, EvalData: held, Out: t.TempDir(), Steps: 1, Batch: 16,
			LR: 1e-9, EvalEvery: 1, Init: init})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Final.Acc) == 0 {
			t.Fatal("no held-out evaluation")
		}
		return rep.Final.Acc[0]
	}
	fromDemo, fromRandom := first(demo), first("")
	t.Logf("held-out accuracy at the first position after one step: %.3f from the demo head, %.3f from random weights", fromDemo, fromRandom)
	if fromDemo < 0.7 || fromRandom > 0.3 {
		t.Errorf("accuracy %.3f from the demo head, %.3f from random weights: want >= 0.7 and <= 0.3", fromDemo, fromRandom)
	}
	_, err := Train(context.Background(), e, Options{Data: data, EvalData: held, Out: t.TempDir(), Steps: 1, Batch: 16, Layers: 1, Init: demo})
	if err == nil || !strings.Contains(err.Error(), "--init") || !strings.Contains(err.Error(), "2 layers") {
		t.Errorf("a 1-layer head from a 2-layer one: err = %v, want the shapes named", err)
	}
}

// Openings cuts every record within its bounds, deterministically by seed,
// and drops empty and repeated texts.
func TestOpenings(t *testing.T) {
	s := &Set{Records: []Record{
		{PromptLen: 2, Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{PromptLen: 1, Tokens: []int32{1, 20, 21, 22, 23, 24, 25, 26, 27, 28}},
		{PromptLen: 3, Tokens: []int32{1, 2, 3, 4}},        // shorter than the cut: all of it
		{PromptLen: 3, Tokens: []int32{1, 2, 3, 4}},        // the same text again: dropped
		{PromptLen: 0, Tokens: []int32{}},                  // empty: dropped
		{PromptLen: 2, Tokens: []int32{1, 30, 31, 32, 33}}, // cut at 2+3…2+5
	}}
	decode := func(ids []int32) string {
		var b strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&b, "%d ", id)
		}
		return b.String()
	}
	for seed := range uint64(20) {
		got := Openings(s, decode, 3, 5, seed)
		if len(got) != 4 {
			t.Fatalf("seed %d: %d openings %q, want 4", seed, len(got), got)
		}
		for i, rec := range []Record{s.Records[0], s.Records[1], s.Records[2], s.Records[5]} {
			n := len(strings.Fields(got[i]))
			lo, hi := min(len(rec.Tokens), rec.PromptLen+3), min(len(rec.Tokens), rec.PromptLen+5)
			if n < lo || n > hi || got[i] != decode(rec.Tokens[:n]) {
				t.Errorf("seed %d: opening %d %q: %d tokens, want a prefix of %d…%d", seed, i, got[i], n, lo, hi)
			}
		}
		if again := Openings(s, decode, 3, 5, seed); !slices.Equal(again, got) {
			t.Errorf("seed %d: %q, then %q", seed, got, again)
		}
	}
}

// WritePrompts writes what ReadPrompts reads back, as JSONL or text; text
// leaves out what would not read back.
func TestWritePrompts(t *testing.T) {
	dir := t.TempDir()
	ps := []string{"Once upon a time", "Two\nlines", `a literal \n`, " "}
	for _, tc := range []struct {
		name string
		want []string
	}{{"p.jsonl", []string{"Once upon a time", "Two\nlines", `a literal \n`}}, {"p.txt", ps[:2]}} {
		path := filepath.Join(dir, tc.name)
		n, err := WritePrompts(path, ps)
		got, rerr := ReadPrompts(path)
		if err != nil || rerr != nil || !slices.Equal(got, tc.want) || (tc.name == "p.txt" && n != 2) {
			t.Errorf("%s: wrote %d (%v), read %q (%v), want %q", tc.name, n, err, got, rerr, tc.want)
		}
	}
}
