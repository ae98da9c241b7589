package train

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Format names the distillation set layout in meta.json.
const Format = "redrafter-distill/1"

// Meta is a distillation set's meta.json: what made it. A rerun into the
// same directory must use the same settings.
type Meta struct {
	Format           string  `json:"format"`
	Model            string  `json:"model"` // as given; informational
	VocabSize        int     `json:"vocab_size"`
	HiddenSize       int     `json:"hidden_size"`
	Prompts          string  `json:"prompts"` // the prompt file, informational
	Template         string  `json:"template,omitempty"`
	MaxTokens        int     `json:"max_tokens"`
	Temperature      float32 `json:"temperature"`
	SamplesPerPrompt int     `json:"samples_per_prompt"`
	Seed             uint64  `json:"seed"`
}

// same reports how m and o differ in the settings that shape the data.
func (m Meta) diff(o Meta) []string {
	var d []string
	add := func(name string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %v (now %v)", name, a, b))
		}
	}
	add("vocab_size", m.VocabSize, o.VocabSize)
	add("hidden_size", m.HiddenSize, o.HiddenSize)
	add("template", m.Template, o.Template)
	add("max_tokens", m.MaxTokens, o.MaxTokens)
	add("temperature", m.Temperature, o.Temperature)
	add("samples_per_prompt", m.SamplesPerPrompt, o.SamplesPerPrompt)
	add("seed", m.Seed, o.Seed)
	return d
}

// Record is one line of a shard: a prompt's continuation by the LLM.
type Record struct {
	Prompt    int     `json:"prompt"`     // index in the prompt file, from 0
	Sample    int     `json:"sample"`     // which continuation of that prompt, from 0
	PromptLen int     `json:"prompt_len"` // leading tokens that are the encoded prompt
	Tokens    []int32 `json:"tokens"`     // prompt then continuation
	Stop      string  `json:"stop,omitempty"`
}

// Set is a distillation set read back.
type Set struct {
	Dir     string
	Meta    Meta
	Records []Record // in shard order
	shards  int
}

// Tokens counts the continuation tokens (the labels) of the set.
func (s *Set) Tokens() int {
	n := 0
	for _, r := range s.Records {
		n += len(r.Tokens) - r.PromptLen
	}
	return n
}

const metaFile = "meta.json"

func shardName(i int) string { return fmt.Sprintf("shard-%05d.jsonl", i) }

// ReadSet reads the distillation set in dir.
func ReadSet(dir string) (*Set, error) {
	raw, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("train: %s is not a distillation set (no %s)", dir, metaFile)
		}
		return nil, fmt.Errorf("train: %w", err)
	}
	s := &Set{Dir: dir}
	if err := json.Unmarshal(raw, &s.Meta); err != nil {
		return nil, fmt.Errorf("train: %s: %w", filepath.Join(dir, metaFile), err)
	}
	if s.Meta.Format != Format {
		return nil, fmt.Errorf("train: %s: format %q, want %q", filepath.Join(dir, metaFile), s.Meta.Format, Format)
	}
	shards, err := filepath.Glob(filepath.Join(dir, "shard-*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	slices.Sort(shards)
	for _, path := range shards {
		var i int
		if _, err := fmt.Sscanf(filepath.Base(path), "shard-%05d.jsonl", &i); err == nil {
			s.shards = max(s.shards, i+1)
		}
		if err := s.readShard(path); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Set) readShard(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("train: %s:%d: %w", path, line, err)
		}
		if r.PromptLen < 1 || r.PromptLen > len(r.Tokens) || r.Prompt < 0 || r.Sample < 0 {
			return fmt.Errorf("train: %s:%d: prompt_len %d for %d tokens", path, line, r.PromptLen, len(r.Tokens))
		}
		for _, t := range r.Tokens {
			if t < 0 || int(t) >= s.Meta.VocabSize {
				return fmt.Errorf("train: %s:%d: token %d outside the vocabulary of %d", path, line, t, s.Meta.VocabSize)
			}
		}
		s.Records = append(s.Records, r)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("train: %s: %w", path, err)
	}
	return nil
}

// writeShard writes records as the next shard of dir, atomically.
func writeShard(dir string, index int, recs []Record) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			return err
		}
	}
	return writeAtomic(filepath.Join(dir, shardName(index)), buf.Bytes())
}

// writeAtomic writes data under a temporary name in path's directory and
// renames it into place.
func writeAtomic(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// WritePrompts writes prompts as a file ReadPrompts reads back the same:
// JSONL ({"prompt": ...}) when path ends in .jsonl, else text, one per line
// with newlines written "\n". Blank prompts are left out, and in text those
// holding a literal "\n" (they would not read back). It writes whole or not at all
// and returns how many prompts it wrote.
func WritePrompts(path string, prompts []string) (int, error) {
	jsonl := strings.HasSuffix(path, ".jsonl")
	var b bytes.Buffer
	n := 0
	for _, p := range prompts {
		switch {
		case strings.TrimSpace(p) == "":
			continue
		case jsonl:
			line, _ := json.Marshal(map[string]string{"prompt": p})
			b.Write(line)
		case strings.Contains(p, `\n`):
			continue
		default:
			b.WriteString(strings.ReplaceAll(p, "\n", `\n`))
		}
		b.WriteByte('\n')
		n++
	}
	return n, writeAtomic(path, b.Bytes())
}

// ReadPrompts reads a prompt file: plain text with one prompt per line
// (blank lines skipped; "\n" in a line stands for a newline), or JSONL
// (.jsonl, optionally .gz) whose objects carry the prompt in "turns" (the
// first turn), "question" or "prompt".
func ReadPrompts(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	name := path
	if strings.HasSuffix(name, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("train: %s: %w", path, err)
		}
		defer gz.Close()
		r, name = gz, strings.TrimSuffix(name, ".gz")
	}
	jsonl := strings.HasSuffix(name, ".jsonl") || strings.HasSuffix(name, ".json")
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var prompts []string
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		if !jsonl {
			prompts = append(prompts, strings.ReplaceAll(text, `\n`, "\n"))
			continue
		}
		var obj struct {
			Turns    []string `json:"turns"`
			Question string   `json:"question"`
			Prompt   string   `json:"prompt"`
		}
		if err := json.Unmarshal([]byte(text), &obj); err != nil {
			return nil, fmt.Errorf("train: %s:%d: %w", path, line, err)
		}
		var p string
		switch {
		case len(obj.Turns) > 0:
			p = obj.Turns[0]
		case obj.Question != "":
			p = obj.Question
		default:
			p = obj.Prompt
		}
		if p == "" {
			return nil, fmt.Errorf("train: %s:%d: no \"turns\", \"question\" or \"prompt\" field", path, line)
		}
		prompts = append(prompts, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("train: %s: %w", path, err)
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("train: %s: no prompts", path)
	}
	return prompts, nil
}
