package bench

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Prompt is one benchmark prompt.
type Prompt struct {
	ID   string `json:"id"` // the record's id, or file:line
	Text string `json:"-"`
}

// ReadPrompts reads a prompt file: JSON lines (.jsonl, or .jsonl.gz
// compressed) whose records hold the prompt as "turns" (a list: the first
// turn is used, as in MT-Bench and Spec-Bench), "question" (GSM8K) or
// "prompt" (HumanEval); or plain text (.txt), one prompt per line with \n
// escapes.
func ReadPrompts(path string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	name := path
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", path, err)
		}
		defer zr.Close()
		r, name = zr, strings.TrimSuffix(name, ".gz")
	}
	switch filepath.Ext(name) {
	case ".txt":
		return parseText(r, path)
	case ".jsonl", ".json":
		return ParsePrompts(r, path)
	}
	return nil, fmt.Errorf("bench: %s: unknown prompt file type (want .jsonl, .jsonl.gz or .txt)", path)
}

// record is the union of the prompt fields of the shared prompt sets.
type record struct {
	Turns      []string        `json:"turns"`
	Question   *string         `json:"question"`
	Prompt     *string         `json:"prompt"`
	QuestionID json.RawMessage `json:"question_id"`
	TaskID     string          `json:"task_id"`
	ID         json.RawMessage `json:"id"`
}

// ParsePrompts reads JSON lines of prompts (see ReadPrompts); name labels
// errors and prompt IDs.
func ParsePrompts(r io.Reader, name string) ([]Prompt, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	var out []Prompt
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("bench: %s:%d: %w", name, line, err)
		}
		p := Prompt{ID: fmt.Sprintf("%s:%d", filepath.Base(name), line)}
		switch {
		case len(rec.Turns) > 0:
			p.Text = rec.Turns[0]
		case rec.Question != nil:
			p.Text = *rec.Question
		case rec.Prompt != nil:
			p.Text = *rec.Prompt
		default:
			return nil, fmt.Errorf("bench: %s:%d: the record has no turns, question or prompt field", name, line)
		}
		switch {
		case rec.TaskID != "":
			p.ID = rec.TaskID
		case len(rec.QuestionID) > 0:
			p.ID = "question " + strings.Trim(string(rec.QuestionID), `"`)
		case len(rec.ID) > 0:
			p.ID = strings.Trim(string(rec.ID), `"`)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: %s has no prompts", name)
	}
	return out, nil
}

func parseText(r io.Reader, name string) ([]Prompt, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	var out []Prompt
	for line := 1; sc.Scan(); line++ {
		t := sc.Text()
		if strings.TrimSpace(t) == "" {
			continue
		}
		out = append(out, Prompt{ID: fmt.Sprintf("%s:%d", filepath.Base(name), line), Text: strings.ReplaceAll(t, `\n`, "\n")})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: %s has no prompts", name)
	}
	return out, nil
}
