package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// The model's own chat template (GGUF tokenizer.chat_template, HF
// chat_template) is Jinja, rendered by github.com/ardanlabs/jinja: a pure-Go
// engine written for LLM chat templates (Hugging Face's trim_blocks and
// lstrip_blocks, namespace, loop, tojson, raise_exception, the Python string
// methods templates call: .strip(), .split(), .startswith(), …). Of the
// engines the module proxy serves it is the one that renders the templates of
// Llama 3.1, Qwen 2.5, Qwen 3, Gemma 3, Phi-4 and Mistral exactly
// (TestJinjaModelTemplates, TestJinjaGolden), with no dependencies of its
// own; github.com/nikolalohinski/gonja/v2 (v2.9.1) renders five of them but
// cannot parse Gemma 3's (a newline inside a string literal) and brings
// eight more modules (logrus, json-iterator, …). v1.8.0 is the newest
// ardanlabs/jinja this Go (1.26) builds; later ones need Go 1.27.

// Template is a model's Jinja chat template, compiled.
type Template struct {
	t *jinja.Template
}

// CompileTemplate parses a Jinja chat template.
func CompileTemplate(src string) (*Template, error) {
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat template: %w", err)
	}
	return &Template{t: t}, nil
}

// TemplateEnv is what a template may read besides the messages.
type TemplateEnv struct {
	// BOS and EOS are the texts of the vocabulary's begin/end tokens
	// (bos_token, eos_token); "" if it has none.
	BOS, EOS string
	// Now is strftime_now's clock (Llama 3.2 writes today's date); nil is
	// time.Now.
	Now func() time.Time
}

// Render is the template's text for msgs, as Hugging Face's
// apply_chat_template(msgs, add_generation_prompt=addGenerationPrompt,
// tokenize=False) gives it: for display and logs.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool, env TemplateEnv) (string, error) {
	return t.render(msgs, nil, addGenerationPrompt, env)
}

// RenderParts renders msgs into Parts: the template's markup Special, the
// messages' content plain, so that content which spells "<|im_end|>" stays
// those characters (see Part). JoinParts of the result is Render's text.
//
// How: besides the real rendering, the template renders once more with a
// sentinel (private-use characters around a number) in place of each
// non-empty content, and that rendering, cut at the sentinels, is the markup
// with the slots the contents fill. The parts are that markup (Special) and,
// in each slot, the text the real rendering has there (plain). A template may
// transform the content it writes: Llama 3.1 and Gemma 3 trim it, Qwen 3
// keeps only what follows "</think>" in earlier assistant turns. So a slot
// holds one of the content's forms that real templates write (as is, trimmed,
// after its last "</think>", …), and the markup and the slots must spell the
// real rendering exactly, or RenderParts is an error: the markup comes only
// from a rendering without any content, so no content can become markup.
func (t *Template) RenderParts(msgs []Message, addGenerationPrompt bool, env TemplateEnv) ([]Part, error) {
	real, err := t.render(msgs, nil, addGenerationPrompt, env)
	if err != nil {
		return nil, err
	}
	// Sentinels: U+E000, the message's index, U+E001. No template trims,
	// splits or changes the case of those; an empty content stays empty, as
	// templates test it ("if message.content").
	sentinels := make([]string, len(msgs))
	for i, m := range msgs {
		if m.Content != "" {
			sentinels[i] = sentinelOpen + strconv.Itoa(i) + sentinelClose
		}
	}
	marked, err := t.render(msgs, sentinels, addGenerationPrompt, env)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat template: rendering it without the messages' text: %w", err)
	}
	markup, slots, err := cutSentinels(marked, len(msgs))
	if err != nil {
		return nil, err
	}
	var r parts
	if !alignSlots(real, markup, slots, msgs, &r) {
		return nil, errors.New("tokenizer: chat template: it writes the messages' text in a form that cannot be told apart from its markup " +
			"(so their text might become control tokens); choose a built-in template")
	}
	return r, nil
}

const sentinelOpen, sentinelClose = "\ue000", "\ue001"

// cutSentinels splits a rendering at its sentinels: markup[k] precedes
// slot k (the index of the message whose content goes there), and
// markup[len(slots)] ends the text.
func cutSentinels(s string, nmsgs int) (markup []string, slots []int, err error) {
	for {
		i := strings.Index(s, sentinelOpen)
		if i < 0 {
			if strings.Contains(s, sentinelClose) {
				return nil, nil, errors.New("tokenizer: chat template: it cuts the messages' text apart")
			}
			return append(markup, s), slots, nil
		}
		j := strings.Index(s[i:], sentinelClose)
		if j < 0 {
			return nil, nil, errors.New("tokenizer: chat template: it cuts the messages' text apart")
		}
		n, err := strconv.Atoi(s[i+len(sentinelOpen) : i+j])
		if err != nil || n < 0 || n >= nmsgs || strings.Contains(s[:i], sentinelClose) {
			return nil, nil, errors.New("tokenizer: chat template: it cuts the messages' text apart")
		}
		markup = append(markup, s[:i])
		slots = append(slots, n)
		s = s[i+j+len(sentinelClose):]
	}
}

// alignSlots fills r with parts spelling real: markup[k] Special, then in
// slot k one of the forms of its message's content (contentForms), plain.
// It backtracks over the forms (a few per slot), remembering the (slot,
// offset) pairs that cannot be completed, so that no conversation makes it
// take more than slots × forms steps.
func alignSlots(real string, markup []string, slots []int, msgs []Message, r *parts) bool {
	a := aligner{real: real, markup: markup, slots: slots, msgs: msgs, dead: map[[2]int]bool{}}
	return a.align(0, 0, r)
}

type aligner struct {
	real   string
	markup []string
	slots  []int
	msgs   []Message
	dead   map[[2]int]bool // (slot, offset in real) that cannot be completed
}

// align spells real[at:] from slot k on.
func (a *aligner) align(k, at int, r *parts) bool {
	if a.dead[[2]int{k, at}] {
		return false
	}
	rest := a.real[at:]
	if !strings.HasPrefix(rest, a.markup[k]) {
		a.dead[[2]int{k, at}] = true
		return false
	}
	at += len(a.markup[k])
	if k == len(a.slots) {
		if at != len(a.real) {
			return false
		}
		r.markup(a.markup[k])
		return true
	}
	for _, form := range contentForms(a.msgs[a.slots[k]].Content) {
		if !strings.HasPrefix(a.real[at:], form) {
			continue
		}
		var tail parts
		if a.align(k+1, at+len(form), &tail) {
			r.markup(a.markup[k])
			r.text(form)
			*r = append(*r, tail...)
			return true
		}
	}
	a.dead[[2]int{k, at - len(a.markup[k])}] = true
	return false
}

// contentForms are the texts real templates write for a message's content,
// the content itself first: Python's strip() (Jinja's trim: Llama 3, Gemma),
// and the reply after the reasoning (Qwen 3, QwQ and DeepSeek-R1 keep what
// follows the last "</think>" of earlier turns, with or without its leading
// newlines).
func contentForms(c string) []string {
	forms := []string{c}
	add := func(f string) {
		for _, g := range forms {
			if g == f {
				return
			}
		}
		forms = append(forms, f)
	}
	add(pyStrip(c))
	if i := strings.LastIndex(c, "</think>"); i >= 0 {
		after := c[i+len("</think>"):]
		add(after)
		add(strings.TrimLeft(after, "\n"))
		add(pyStrip(after))
	}
	return forms
}

// render runs the template; contents, if not nil, replaces each message's
// content.
func (t *Template) render(msgs []Message, contents []string, addGenerationPrompt bool, env TemplateEnv) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		c := m.Content
		if contents != nil {
			c = contents[i]
		}
		d.AsDict().Set("content", jinja.NewString(c))
		list[i] = d
	}
	now := env.Now
	if now == nil {
		now = time.Now
	}
	vars := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"bos_token":             jinja.NewString(env.BOS),
		"eos_token":             jinja.NewString(env.EOS),
		// As Hugging Face passes them when a chat has no tools or documents.
		"tools":     jinja.None(),
		"documents": jinja.None(),
		"raise_exception": jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			msg := "raise_exception"
			if len(args) > 0 {
				msg = args[0].String()
			}
			return jinja.Undefined(), &TemplateError{Message: msg}
		}),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 || !args[0].IsString() {
				return jinja.Undefined(), errors.New("strftime_now: want one format string")
			}
			return jinja.NewString(strftime(now(), args[0].AsString())), nil
		}),
	}
	out, err := t.t.RenderValues(vars)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("tokenizer: chat template: %w", err)
	}
	return out, nil
}

// TemplateError is a template's own refusal (raise_exception), such as
// "Conversation roles must alternate user/assistant/user/assistant/...".
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return "the chat template refuses the messages: " + e.Message }

// strftime formats t with Python's strftime directives that templates use
// (Llama 3.2: "%d %b %Y").
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			b.WriteString(t.Format("2006"))
		case 'y':
			b.WriteString(t.Format("06"))
		case 'm':
			b.WriteString(t.Format("01"))
		case 'd':
			b.WriteString(t.Format("02"))
		case 'e':
			b.WriteString(t.Format("_2"))
		case 'H':
			b.WriteString(t.Format("15"))
		case 'I':
			b.WriteString(t.Format("03"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
