package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// benchFixture writes a random draft head for stories260K and a prompt file.
func benchFixture(t *testing.T) (head, prompts string) {
	t.Helper()
	dir := t.TempDir()
	head = filepath.Join(dir, "head")
	if err := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1).Save(head); err != nil {
		t.Fatal(err)
	}
	prompts = filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(prompts, []byte(`{"turns": ["Once upon a time", "ignored"]}`+"\n"+`{"question": "The dog"}`+"\n"+`{"prompt": "Sam"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return head, prompts
}

func TestBench(t *testing.T) {
	head, prompts := benchFixture(t)
	svg := filepath.Join(t.TempDir(), "map.svg")
	out, stderr, err := run(t, "", "bench", "--backend", "cpu", "--model", stories, "--drafter", head, "--prompts", prompts,
		"--limit", "2", "--max-tokens", "16", "--beam-width", "1,3", "--beam-length", "2,4", "--json", "-", "--svg", svg, "--passes", "1,4")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Prompts []string
		Model   struct{ Path string }
		Passes  []struct{ Tokens int }
		Cells   []struct {
			W       int     `json:"beam_width"`
			L       int     `json:"beam_length"`
			Speedup float64 `json:"speedup"`
		} `json:"redrafter"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
	}
	if len(r.Prompts) != 2 || r.Model.Path != stories || len(r.Cells) != 4 || len(r.Passes) != 2 || r.Cells[3].W != 3 || r.Cells[3].L != 4 || !(r.Cells[0].Speedup > 0) {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(stderr, "autoregressive  32 tokens") || !strings.Contains(stderr, "tok/step") {
		t.Errorf("the table is not on stderr:\n%s", stderr)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct{})); err != nil {
		t.Errorf("SVG: %v", err)
	}

	// Without --json the table goes to stdout.
	out, _, err = run(t, "", "bench", "--backend", "cpu", "--model", stories, "--drafter", head, "--prompts", prompts,
		"--limit", "1", "--max-tokens", "8", "--beam-width", "2", "--beam-length", "3")
	if err != nil || !strings.Contains(out, "speedup") || strings.Contains(out, "{") {
		t.Errorf("table on stdout: %v\n%s", err, out)
	}
}

// TestBenchThreads: a thread-count sweep runs the benchmark once per count,
// each with the read bandwidth measured at that count, and adds the scaling
// table; the JSON is then an array of reports.
func TestBenchThreads(t *testing.T) {
	head, prompts := benchFixture(t)
	out, stderr, err := run(t, "", "bench", "--backend", "cpu", "--model", stories, "--drafter", head, "--prompts", prompts,
		"--limit", "1", "--max-tokens", "8", "--beam-width", "1", "--beam-length", "3", "--threads", "1,2", "--json", "-")
	if err != nil {
		t.Fatal(err)
	}
	var rs []struct {
		Machine struct {
			Threads   int
			Bandwidth [2]float64 `json:"read_bandwidth_bytes_per_s"`
		}
		Model struct {
			DecodeBytes int64 `json:"decode_bytes"`
		}
		Autoregressive struct {
			Fraction float64 `json:"bandwidth_fraction"`
		}
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("stdout is not a JSON array of reports: %v\n%s", err, out)
	}
	if len(rs) != 2 || rs[0].Machine.Threads != 1 || rs[1].Machine.Threads != 2 {
		t.Fatalf("reports %+v", rs)
	}
	for _, r := range rs {
		if !(r.Machine.Bandwidth[0] > 0 && r.Machine.Bandwidth[1] > 0 && r.Autoregressive.Fraction > 0) || r.Model.DecodeBytes != 1040384 {
			t.Errorf("report %+v", r)
		}
	}
	if !strings.Contains(stderr, "scaling with threads") || !strings.Contains(stderr, "of the measured read bandwidth") {
		t.Errorf("no scaling table or bandwidth line on stderr:\n%s", stderr)
	}
}

func TestBenchErrors(t *testing.T) {
	head, prompts := benchFixture(t)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"text": "x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"bench", "--backend", "cpu", "--model", stories, "--max-tokens", "4"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prompts", prompts}, `required flag(s) "drafter" not set`},
		{[]string{"--drafter", head}, `required flag(s) "prompts" not set`},
		{[]string{"--drafter", head, "--prompts", prompts, "--max-tokens", "0"}, "--max-tokens must be positive"},
		{[]string{"--drafter", head, "--prompts", prompts, "--limit", "-1"}, "--limit must not be negative"},
		{[]string{"--drafter", head, "--prompts", prompts, "--beam-length", "1"}, "beam length 1"},
		{[]string{"--drafter", head, "--prompts", prompts, "--beam-width", "99"}, "beam width 99"},
		{[]string{"--drafter", head, "--prompts", prompts, "--beam-width", "x"}, "invalid argument"},
		{[]string{"--drafter", head, "--prompts", prompts, "--template", "alpaca"}, `unknown chat template "alpaca"`},
		{[]string{"--drafter", head, "--prompts", bad}, "bad.jsonl:1: the record has no turns, question or prompt field"},
		{[]string{"--drafter", head, "--prompts", "nowhere.jsonl"}, "no such file"},
		{[]string{"--drafter", t.TempDir(), "--prompts", prompts}, "not a draft head checkpoint"},
		{[]string{"--drafter", head, "--prompts", prompts, "--threads", "1,0"}, "--threads 0: want 1 to"},
	} {
		if _, _, err := run(t, "", append(base, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %s: %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
