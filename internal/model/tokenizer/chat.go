package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
)

// Message is one chat turn. Role is "system", "user" or "assistant".
type Message struct {
	Role, Content string
}

// VicunaSystem is FastChat's default vicuna_v1.1 system prompt.
const VicunaSystem = "A chat between a curious user and an artificial intelligence assistant. " +
	"The assistant gives helpful, detailed, and polite answers to the user's questions."

// Built-in chat template names for RenderChat.
const (
	TemplateVicuna = "vicuna" // FastChat vicuna_v1.1: "{system} USER: … ASSISTANT: …</s>USER: … ASSISTANT:"
	TemplateLlama2 = "llama2" // Llama-2-chat: "<s>[INST] <<SYS>>\n…\n<</SYS>>\n\n… [/INST] … </s>"
	TemplateChatML = "chatml" // "<|im_start|>role\n…<|im_end|>\n" (Qwen, many fine-tunes)
	TemplateLlama3 = "llama3" // Llama-3-Instruct header blocks
)

// Part is one piece of a rendered chat prompt. Special parts are the
// template's own markup, whose special-token text ("<|im_start|>", "</s>")
// becomes those tokens; the others are what the conversation brings (message
// content, role names), which is plain text: a user who writes "<|im_end|>"
// or "</s>" gets those characters, never the control tokens, so content can
// neither end its turn nor forge another (llama.cpp's parse_special=false for
// content, the HF tokenizers' split_special_tokens). [Tokenizer.EncodeParts]
// turns parts into ids.
//
// A model's own Jinja template produces parts with [Template.RenderParts]:
// it renders with a sentinel in place of each message's content, the text
// between the sentinels is Special markup, and each sentinel's slot is a
// plain part holding the content as the template wrote it (trimmed, say),
// checked against the real rendering.
type Part struct {
	Text    string
	Special bool
}

// JoinParts is the text of parts, for display: special-token text stands
// for those tokens, and content that spells one looks the same.
func JoinParts(parts []Part) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// RenderChat renders msgs the way the model family's Hugging Face template
// (or, for Vicuna, FastChat) does: JoinParts of RenderChatParts. A leading
// "system" message sets the system prompt. addGenerationPrompt appends the
// opening of the assistant's turn; the Llama-2 template always ends a user
// turn with " [/INST]" and ignores it.
//
// The text is for display: to tokenize a conversation, encode
// RenderChatParts with EncodeParts, which keeps the content plain text.
// llama2 and llama3 output starts with the BOS text ("<s>",
// "<|begin_of_text|>"; see TemplateAddsBOS), so encode those without
// addBOS; vicuna with it, and chatml with the model's AddBOS.
func RenderChat(template string, msgs []Message, addGenerationPrompt bool) (string, error) {
	parts, err := RenderChatParts(template, msgs, addGenerationPrompt)
	if err != nil {
		return "", err
	}
	return JoinParts(parts), nil
}

// RenderChatParts renders msgs as RenderChat does, the template's markup
// (Special) apart from the messages' roles and content (plain).
func RenderChatParts(template string, msgs []Message, addGenerationPrompt bool) ([]Part, error) {
	var r parts
	switch template {
	case TemplateVicuna:
		return renderVicuna(msgs, addGenerationPrompt)
	case TemplateLlama2:
		return renderLlama2(msgs)
	case TemplateChatML:
		for _, m := range msgs {
			r.markup("<|im_start|>")
			r.text(m.Role)
			r.markup("\n")
			r.text(m.Content)
			r.markup("<|im_end|>\n")
		}
		if addGenerationPrompt {
			r.markup("<|im_start|>assistant\n")
		}
		return r, nil
	case TemplateLlama3:
		for i, m := range msgs {
			if i == 0 {
				r.markup("<|begin_of_text|>")
			}
			r.markup("<|start_header_id|>")
			r.text(m.Role)
			r.markup("<|end_header_id|>\n\n")
			r.text(pyStrip(m.Content))
			r.markup("<|eot_id|>")
		}
		if addGenerationPrompt {
			r.markup("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
		return r, nil
	}
	return nil, fmt.Errorf("tokenizer: unknown chat template %q (want %s, %s, %s or %s)",
		template, TemplateVicuna, TemplateLlama2, TemplateChatML, TemplateLlama3)
}

// parts collects a rendering; empty parts are left out.
type parts []Part

func (r *parts) markup(s string) { r.add(s, true) }
func (r *parts) text(s string)   { r.add(s, false) }

func (r *parts) add(s string, special bool) {
	if s != "" {
		*r = append(*r, Part{Text: s, Special: special})
	}
}

// TemplateAddsBOS reports whether a built-in template's output already
// starts with the BOS token text.
func TemplateAddsBOS(template string) bool {
	return template == TemplateLlama2 || template == TemplateLlama3
}

// DetectTemplate names the built-in template that matches a model's Jinja
// chat_template, or returns "" if none does.
func DetectTemplate(chatTemplate string) string {
	switch {
	case strings.Contains(chatTemplate, "<|start_header_id|>"):
		return TemplateLlama3
	case strings.Contains(chatTemplate, "<|im_start|>"):
		return TemplateChatML
	case strings.Contains(chatTemplate, "[INST]"):
		return TemplateLlama2
	case strings.Contains(chatTemplate, "USER:") && strings.Contains(chatTemplate, "ASSISTANT:"):
		return TemplateVicuna
	}
	return ""
}

// splitSystem takes a leading system message off msgs.
func splitSystem(msgs []Message) (system string, ok bool, rest []Message) {
	if len(msgs) > 0 && msgs[0].Role == "system" {
		return msgs[0].Content, true, msgs[1:]
	}
	return "", false, msgs
}

// checkAlternation requires user, assistant, user, … after the system message.
func checkAlternation(template string, msgs []Message) error {
	for i, m := range msgs {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if m.Role != want {
			return fmt.Errorf("tokenizer: %s chat: message %d has role %q, want %q (roles must alternate user/assistant after an optional system message)",
				template, i, m.Role, want)
		}
	}
	return nil
}

// renderVicuna follows FastChat's SeparatorStyle.ADD_COLON_TWO with sep " "
// and sep2 "</s>". The default system prompt is markup; one the
// conversation sets is content.
func renderVicuna(msgs []Message, addGenerationPrompt bool) ([]Part, error) {
	system, ok, msgs := splitSystem(msgs)
	if err := checkAlternation(TemplateVicuna, msgs); err != nil {
		return nil, err
	}
	if addGenerationPrompt && len(msgs)%2 == 0 {
		return nil, fmt.Errorf("tokenizer: %s chat: a generation prompt must follow a user message", TemplateVicuna)
	}
	seps := [2]string{" ", "</s>"}
	roles := [2]string{"USER", "ASSISTANT"}
	var r parts
	if ok {
		r.text(system)
	} else {
		r.markup(VicunaSystem)
	}
	r.markup(seps[0])
	for i, m := range msgs {
		if m.Content == "" {
			r.markup(roles[i%2] + ":")
			continue
		}
		r.markup(roles[i%2] + ": ")
		r.text(m.Content)
		r.markup(seps[i%2])
	}
	if addGenerationPrompt {
		r.markup(roles[1] + ":")
	}
	return r, nil
}

// renderLlama2 follows the Llama-2-chat-hf chat_template, whose trim of the
// first user turn covers the system block joined to it.
func renderLlama2(msgs []Message) ([]Part, error) {
	system, hasSystem, msgs := splitSystem(msgs)
	if err := checkAlternation(TemplateLlama2, msgs); err != nil {
		return nil, err
	}
	var r parts
	for i, m := range msgs {
		var content parts
		if i == 0 && hasSystem {
			content.markup("<<SYS>>\n")
			content.text(system)
			content.markup("\n<</SYS>>\n\n")
		}
		content.text(m.Content)
		content = stripParts(content)
		if m.Role == "user" {
			r.markup("<s>[INST] ")
			r = append(r, content...)
			r.markup(" [/INST]")
		} else {
			r.markup(" ")
			r = append(r, content...)
			r.markup(" </s>")
		}
	}
	return r, nil
}

// stripParts is pyStrip of the parts' joined text, part by part: what it
// trims may span parts (an all-blank user turn after a system block).
func stripParts(r parts) parts {
	for len(r) > 0 {
		r[0].Text = strings.TrimLeftFunc(r[0].Text, isPySpace)
		if r[0].Text != "" {
			break
		}
		r = r[1:]
	}
	for len(r) > 0 {
		last := &r[len(r)-1]
		last.Text = strings.TrimRightFunc(last.Text, isPySpace)
		if last.Text != "" {
			break
		}
		r = r[:len(r)-1]
	}
	return r
}

// pyStrip is Python's str.strip() (Jinja's trim filter): Unicode whitespace
// plus the ASCII separators U+001C–U+001F.
func pyStrip(s string) string { return strings.TrimFunc(s, isPySpace) }

func isPySpace(r rune) bool { return unicode.IsSpace(r) || 0x1c <= r && r <= 0x1f }
