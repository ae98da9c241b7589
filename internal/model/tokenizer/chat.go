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

// RenderChat renders msgs the way the model family's Hugging Face template
// (or, for Vicuna, FastChat) does. A leading "system" message sets the system
// prompt. addGenerationPrompt appends the opening of the assistant's turn; the
// Llama-2 template always ends a user turn with " [/INST]" and ignores it.
//
// llama2 and llama3 output starts with the BOS text ("<s>",
// "<|begin_of_text|>"; see TemplateAddsBOS), so encode those with
// EncodeSpecial(prompt, false); encode vicuna with EncodeSpecial(prompt, true)
// and chatml with the model's AddBOS.
func RenderChat(template string, msgs []Message, addGenerationPrompt bool) (string, error) {
	switch template {
	case TemplateVicuna:
		return renderVicuna(msgs, addGenerationPrompt)
	case TemplateLlama2:
		return renderLlama2(msgs)
	case TemplateChatML:
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		if addGenerationPrompt {
			b.WriteString("<|im_start|>assistant\n")
		}
		return b.String(), nil
	case TemplateLlama3:
		var b strings.Builder
		for i, m := range msgs {
			if i == 0 {
				b.WriteString("<|begin_of_text|>")
			}
			b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + pyStrip(m.Content) + "<|eot_id|>")
		}
		if addGenerationPrompt {
			b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("tokenizer: unknown chat template %q (want %s, %s, %s or %s)",
		template, TemplateVicuna, TemplateLlama2, TemplateChatML, TemplateLlama3)
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
// and sep2 "</s>".
func renderVicuna(msgs []Message, addGenerationPrompt bool) (string, error) {
	system, ok, msgs := splitSystem(msgs)
	if !ok {
		system = VicunaSystem
	}
	if err := checkAlternation(TemplateVicuna, msgs); err != nil {
		return "", err
	}
	if addGenerationPrompt && len(msgs)%2 == 0 {
		return "", fmt.Errorf("tokenizer: %s chat: a generation prompt must follow a user message", TemplateVicuna)
	}
	seps := [2]string{" ", "</s>"}
	roles := [2]string{"USER", "ASSISTANT"}
	var b strings.Builder
	b.WriteString(system + seps[0])
	for i, m := range msgs {
		if m.Content == "" {
			b.WriteString(roles[i%2] + ":")
			continue
		}
		b.WriteString(roles[i%2] + ": " + m.Content + seps[i%2])
	}
	if addGenerationPrompt {
		b.WriteString(roles[1] + ":")
	}
	return b.String(), nil
}

// renderLlama2 follows the Llama-2-chat-hf chat_template.
func renderLlama2(msgs []Message) (string, error) {
	system, hasSystem, msgs := splitSystem(msgs)
	if err := checkAlternation(TemplateLlama2, msgs); err != nil {
		return "", err
	}
	var b strings.Builder
	for i, m := range msgs {
		content := m.Content
		if i == 0 && hasSystem {
			content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
		}
		if m.Role == "user" {
			b.WriteString("<s>[INST] " + pyStrip(content) + " [/INST]")
		} else {
			b.WriteString(" " + pyStrip(content) + " </s>")
		}
	}
	return b.String(), nil
}

// pyStrip is Python's str.strip() (Jinja's trim filter): Unicode whitespace
// plus the ASCII separators U+001C–U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || 0x1c <= r && r <= 0x1f
	})
}
