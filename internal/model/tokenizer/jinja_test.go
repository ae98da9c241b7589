package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The models' own chat templates in testdata/templates are the
// chat_template strings of their tokenizer_config.json files:
//
//   - llama3.1: meta-llama/Llama-3.1-8B-Instruct (Llama 3.3 ships the same
//     text), copied from ye-NX/llama.cpp
//     models/templates/meta-llama-Llama-3.3-70B-Instruct.jinja
//   - qwen2.5: Qwen/Qwen2.5-7B-Instruct
//   - qwen3: Qwen/Qwen3-0.6B, from ye-NX/llama.cpp models/templates/Qwen-Qwen3-0.6B.jinja
//   - gemma3: google/gemma-3-1b-it
//   - phi4: microsoft/phi-4
//   - mistral-nemo: mistralai/Mistral-Nemo-Instruct-2407, from ye-NX/llama.cpp
//     models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja
//
// (see testdata/README.md). The Qwen 2.5, Gemma 3 and Phi-4 strings were
// checked against public copies of those tokenizer_config.json files.

// templateTokens are each family's bos_token and eos_token.
var templateTokens = map[string]TemplateEnv{
	"llama3.1":     {BOS: "<|begin_of_text|>", EOS: "<|eot_id|>"},
	"qwen2.5":      {EOS: "<|im_end|>"},
	"qwen3":        {EOS: "<|im_end|>"},
	"gemma3":       {BOS: "<bos>", EOS: "<eos>"},
	"phi4":         {BOS: "<|endoftext|>", EOS: "<|im_end|>"},
	"mistral-nemo": {BOS: "<s>", EOS: "</s>"},
}

func loadTemplate(t testing.TB, name string) *Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := CompileTemplate(string(src))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tm
}

// TestJinjaModelTemplates: each model's template renders system + user +
// assistant + user with the generation prompt as exactly the prompt the
// model card documents, both as text and as parts.
func TestJinjaModelTemplates(t *testing.T) {
	msgs := []Message{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "Hello"},
		{Role: "assistant", Content: "Hi there"},
		{Role: "user", Content: "Who are you?"},
	}
	want := map[string]string{
		"llama3.1": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
			"Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" +
			"You are a helpful assistant.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n",
		"qwen2.5": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
			"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n" +
			"<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n",
		"qwen3": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
			"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n" +
			"<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n",
		// Gemma has no system turn: the system text opens the first user turn.
		"gemma3": "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello<end_of_turn>\n" +
			"<start_of_turn>model\nHi there<end_of_turn>\n" +
			"<start_of_turn>user\nWho are you?<end_of_turn>\n<start_of_turn>model\n",
		"phi4": "<|im_start|>system<|im_sep|>You are a helpful assistant.<|im_end|>" +
			"<|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|>" +
			"<|im_start|>user<|im_sep|>Who are you?<|im_end|><|im_start|>assistant<|im_sep|>",
		// Mistral puts the system prompt into the last user turn.
		"mistral-nemo": "<s>[INST]Hello[/INST]Hi there</s>[INST]You are a helpful assistant.\n\nWho are you?[/INST]",
	}
	for name, w := range want {
		tm := loadTemplate(t, name)
		got, err := tm.Render(msgs, true, templateTokens[name])
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != w {
			t.Errorf("%s:\n got %q\nwant %q", name, got, w)
		}
		parts, err := tm.RenderParts(msgs, true, templateTokens[name])
		if err != nil {
			t.Errorf("%s: RenderParts: %v", name, err)
			continue
		}
		if got := JoinParts(parts); got != w {
			t.Errorf("%s: parts spell\n%q\nwant %q", name, got, w)
		}
		// Each message's text is one plain part.
		for _, m := range msgs {
			found := false
			for _, p := range parts {
				found = found || !p.Special && p.Text == m.Content
			}
			if !found {
				t.Errorf("%s: no plain part %q in %+v", name, m.Content, parts)
			}
		}
	}
}

type templateGolden struct {
	Template     string    `json:"template"`
	Conversation string    `json:"conversation"`
	Messages     []Message `json:"messages"`
	Text         string    `json:"text"`
}

func loadTemplateGolden(t *testing.T) []templateGolden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "template_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g []templateGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g) < 30 {
		t.Fatalf("%d golden prompts, want 30", len(g))
	}
	return g
}

// TestJinjaGolden: Render and RenderParts spell what Python's jinja2 renders
// in transformers' environment (gen_template_golden.py), for conversations
// whose text the templates trim (Llama 3.1, Gemma 3), split at </think>
// (Qwen 3) or move (Mistral), and for content that forges markup.
func TestJinjaGolden(t *testing.T) {
	for _, g := range loadTemplateGolden(t) {
		tm := loadTemplate(t, g.Template)
		env := templateTokens[g.Template]
		env.Now = func() time.Time { return time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC) }
		got, err := tm.Render(g.Messages, true, env)
		if err != nil {
			t.Errorf("%s/%s: %v", g.Template, g.Conversation, err)
			continue
		}
		if got != g.Text {
			t.Errorf("%s/%s:\n got %q\nwant %q", g.Template, g.Conversation, got, g.Text)
		}
		parts, err := tm.RenderParts(g.Messages, true, env)
		if err != nil {
			t.Errorf("%s/%s: RenderParts: %v", g.Template, g.Conversation, err)
			continue
		}
		if got := JoinParts(parts); got != g.Text {
			t.Errorf("%s/%s: parts spell\n%q\nwant %q", g.Template, g.Conversation, got, g.Text)
		}
	}
}

// TestJinjaForgedContentIsPlain: content that spells every family's markup
// adds no markup: each control-token text occurs in the Special parts of
// the forged conversation exactly as often as in the same conversation in
// plain words, and the forged text is in plain parts, whole.
func TestJinjaForgedContentIsPlain(t *testing.T) {
	markers := []string{"<|im_end|>", "<|im_start|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
		"<end_of_turn>", "<start_of_turn>", "[/INST]", "[INST]", "</s>", "<s>", "<|im_sep|>"}
	count := func(ps []Part, special bool) map[string]int {
		n := map[string]int{}
		for _, p := range ps {
			if p.Special == special {
				for _, m := range markers {
					n[m] += strings.Count(p.Text, m)
				}
			}
		}
		return n
	}
	byKey := map[string]templateGolden{}
	for _, g := range loadTemplateGolden(t) {
		byKey[g.Template+"/"+g.Conversation] = g
	}
	for name, env := range templateTokens {
		tm := loadTemplate(t, name)
		forged, plain := byKey[name+"/forged"], byKey[name+"/basic"]
		fp, err := tm.RenderParts(forged.Messages, true, env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pp, err := tm.RenderParts(plain.Messages, true, env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := count(fp, true), count(pp, true); !equalCounts(got, want) {
			t.Errorf("%s: markup has %v, want the template's own %v", name, got, want)
		}
		forgedText := forged.Messages[0].Content
		n := 0
		for _, p := range fp {
			if !p.Special {
				n += strings.Count(p.Text, forgedText)
			}
		}
		// Gemma writes the system text into the first user turn, Mistral
		// into the last; every other template writes each message once.
		if n != 4 {
			t.Errorf("%s: the forged text is whole in plain parts %d times, want 4: %+v", name, n, fp)
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// TestJinjaForgedTokens: encoded with the Qwen3 and Llama 3 vocabularies,
// the forged conversation has exactly the control tokens of the plain one.
func TestJinjaForgedTokens(t *testing.T) {
	byKey := map[string]templateGolden{}
	for _, g := range loadTemplateGolden(t) {
		byKey[g.Template+"/"+g.Conversation] = g
	}
	for _, c := range []struct{ template, tok string }{{"qwen2.5", "qwen3"}, {"qwen3", "qwen3"}, {"llama3.1", "llama3"}} {
		_, tok := loadHF(t, c.tok)
		env := templateTokens[c.template]
		tm := loadTemplate(t, c.template)
		controls := func(conv string) []int32 {
			parts, err := tm.RenderParts(byKey[c.template+"/"+conv].Messages, true, env)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int32
			for _, id := range tok.EncodeParts(parts, false) {
				if tok.IsControl(id) {
					ids = append(ids, id)
				}
			}
			return ids
		}
		got, want := controls("forged"), controls("basic")
		if len(want) < 8 || !equalIDs(got, want) {
			t.Errorf("%s: control tokens %v, want the template's %v", c.template, got, want)
		}
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestJinjaErrors: a template that does not parse, one that refuses the
// messages (raise_exception), and one that writes content in a form that
// cannot be told from its markup are errors that say so.
func TestJinjaErrors(t *testing.T) {
	if _, err := CompileTemplate("{% for m in messages %}{{ m.content }"); err == nil {
		t.Error("an unclosed tag compiled")
	}
	gemma := loadTemplate(t, "gemma3")
	_, err := gemma.RenderParts([]Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, true, templateTokens["gemma3"])
	var te *TemplateError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "Conversation roles must alternate") {
		t.Errorf("Gemma 3 with two user turns: %v, want its raise_exception message", err)
	}
	upper, err := CompileTemplate("{% for m in messages %}<|im_start|>{{ m.content | upper }}<|im_end|>{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := upper.RenderParts([]Message{{Role: "user", Content: "hi <|im_end|>"}}, true, TemplateEnv{}); err == nil ||
		!strings.Contains(err.Error(), "cannot be told apart") {
		t.Errorf("a template that upper-cases content: %v, want an error", err)
	}
	// Content that spells the sentinels is still only content.
	tm, err := CompileTemplate("{% for m in messages %}[{{ m.content }}]{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: sentinelOpen + "1" + sentinelClose}, {Role: "user", Content: "x"}}
	parts, err := tm.RenderParts(msgs, false, TemplateEnv{})
	if err != nil || len(parts) != 5 || parts[1].Special || parts[1].Text != msgs[0].Content {
		t.Errorf("content spelling a sentinel: %+v, %v", parts, err)
	}
}

// TestJinjaStrftimeNow: strftime_now reads the given clock, as Llama 3.2's
// template writes today's date.
func TestJinjaStrftimeNow(t *testing.T) {
	tm, err := CompileTemplate(`{{ "Today Date: " + strftime_now("%d %b %Y") }}|{{ strftime_now("%Y-%m-%d %H:%M %A") }}`)
	if err != nil {
		t.Fatal(err)
	}
	env := TemplateEnv{Now: func() time.Time { return time.Date(2024, 7, 5, 9, 3, 0, 0, time.UTC) }}
	got, err := tm.Render(nil, false, env)
	if want := "Today Date: 05 Jul 2024|2024-07-05 09:03 Friday"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}

// Content whose forms match in many ways cannot make RenderParts take
// exponential time: 60 blank messages, each of which fits its slot as is
// or stripped, before a slot that fails (the content upper-cased).
func TestJinjaAlignmentIsBounded(t *testing.T) {
	tm, err := CompileTemplate("{% for m in messages %}{{ m.content }}{% endfor %}{{ messages[0].content | upper }}")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "x"}}
	for range 60 {
		msgs = append(msgs, Message{Role: "user", Content: "  "})
	}
	start := time.Now()
	if _, err := tm.RenderParts(msgs, false, TemplateEnv{}); err == nil {
		t.Error("a template that upper-cases content rendered into parts")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("RenderParts took %v", d)
	}
}
