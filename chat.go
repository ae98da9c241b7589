package redrafter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// Message is one turn of a conversation.
type Message struct {
	// Role is "system" (a first message that sets the system prompt),
	// "user" or "assistant". Vicuna and Llama-2 also want user and
	// assistant to alternate after the system message.
	Role    string
	Content string
}

// ChatOptions control one chat turn (Session.Chat).
type ChatOptions struct {
	// Template names the chat template that frames the conversation:
	// "model", the model's own Jinja template (GGUF tokenizer.chat_template,
	// HF chat_template); or a built-in one, "vicuna", "llama2", "chatml" or
	// "llama3". "" or "auto" is the model's own when it has one, else
	// vicuna (ModelInfo.Template says which).
	Template string
	// GenerateOptions control the reply. Chat tokenizes the conversation
	// itself (the template's markers are special tokens, the messages' text
	// is plain text, and a template that writes BOS gets no second one), so
	// ParseSpecial and NoBOS here are ignored.
	GenerateOptions
}

// Chat generates the assistant's reply to msgs, framed by the chat
// template and followed by the opening of the assistant's turn. Send the
// whole conversation each turn, the reply included: as with Generate, the
// session's KV cache keeps the prefix that did not change, so a turn runs
// only what is new. The Result is the reply's, as Generate's.
//
// Message content is plain text: "</s>" or "<|im_start|>system" in a
// message is those characters, never the control tokens, so a message
// cannot end its turn or forge another. Only the template's own markup
// becomes special tokens (ChatTokens gives the ids).
//
// An empty conversation, a role other than system, user or assistant, an
// unknown template name, or messages the template cannot frame (Vicuna and
// Llama-2 want user and assistant to alternate) is an error before any work.
func (s *Session) Chat(ctx context.Context, msgs []Message, opt ChatOptions, onText func(string) error) (*Result, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	if err := opt.validate(); err != nil {
		return nil, err
	}
	ids, err := s.e.chatTokens(msgs, opt.Template)
	if err != nil {
		return nil, err
	}
	return s.generate(ctx, ids, opt.GenerateOptions, onText)
}

// RenderChat is the text Chat frames msgs in with the named template (see
// ChatOptions.Template), ending with the opening of the assistant's turn:
// to show or log a prompt. Its special-token text ("<|im_start|>", "</s>")
// stands for those tokens where the template wrote it; the same text in a
// message looks alike but is plain text. ChatTokens gives the ids Chat runs.
func (e *Engine) RenderChat(msgs []Message, template string) (string, error) {
	parts, _, err := e.renderChat(msgs, template)
	return tokenizer.JoinParts(parts), err
}

// ChatTokens are the token ids Chat would run for msgs with the named
// template (the BOS token included): their number measures a conversation
// against Context before it is sent, to drop old turns when it no longer
// fits.
func (e *Engine) ChatTokens(msgs []Message, template string) ([]int32, error) {
	if e.isClosed() {
		return nil, ErrClosed
	}
	return e.chatTokens(msgs, template)
}

func (e *Engine) chatTokens(msgs []Message, template string) ([]int32, error) {
	parts, hasBOS, err := e.renderChat(msgs, template)
	if err != nil {
		return nil, err
	}
	return e.tok.EncodeParts(parts, !hasBOS), nil
}

// TemplateModel is the name of the model's own chat template.
const TemplateModel = "model"

// chatTemplate resolves a template name: "" and "auto" become the model's
// own template when it has one, else vicuna (the CLI's chat warns then).
// A template the checkpoint has is never swapped for a guessed one: if it
// does not compile, auto is that error.
func (e *Engine) chatTemplate(name string) (string, error) {
	switch name {
	case tokenizer.TemplateVicuna, tokenizer.TemplateLlama2, tokenizer.TemplateChatML, tokenizer.TemplateLlama3:
		return name, nil
	case TemplateModel, "", "auto":
		if e.jinjaErr != nil {
			return "", fmt.Errorf("redrafter: the model's chat template: %w (choose a built-in one: vicuna, llama2, chatml or llama3)", e.jinjaErr)
		}
		if e.jinja != nil {
			return TemplateModel, nil
		}
		if name == TemplateModel {
			return "", errors.New("redrafter: the model has no chat template of its own (choose vicuna, llama2, chatml or llama3)")
		}
		return tokenizer.TemplateVicuna, nil
	}
	return "", fmt.Errorf("redrafter: chat template %q: want model, vicuna, llama2, chatml, llama3 or auto", name)
}

// renderChat renders msgs with a template name, the template's markup apart
// from the messages' text (tokenizer.Part), and says whether no BOS is to be
// added: the text starts with it (Llama-2's and Llama-3's built-ins, model
// templates that write bos_token), or a model template's vocabulary wants
// none.
func (e *Engine) renderChat(msgs []Message, template string) (parts []tokenizer.Part, hasBOS bool, err error) {
	if len(msgs) == 0 {
		return nil, false, errors.New("redrafter: no messages")
	}
	tmpl, err := e.chatTemplate(template)
	if err != nil {
		return nil, false, err
	}
	tm := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			// ChatML and Llama-3 would frame any role; refuse them all alike.
			return nil, false, fmt.Errorf("redrafter: message %d: role %q: want system, user or assistant", i, m.Role)
		}
		tm[i] = tokenizer.Message{Role: m.Role, Content: m.Content}
	}
	if tmpl == TemplateModel {
		return e.renderModelChat(tm)
	}
	// The template's own error names it and the message at fault.
	if parts, err = tokenizer.RenderChatParts(tmpl, tm, true); err != nil {
		return nil, false, err
	}
	return parts, tokenizer.TemplateAddsBOS(tmpl), nil
}

// renderModelChat renders the model's own template, as Hugging Face's
// apply_chat_template does, with bos_token and eos_token the vocabulary's.
// A template that writes bos_token first gets no second BOS; one that does
// not gets the BOS the vocabulary asks for (add_bos_token), as llama.cpp
// tokenizes a rendered chat.
func (e *Engine) renderModelChat(msgs []tokenizer.Message) ([]tokenizer.Part, bool, error) {
	env := tokenizer.TemplateEnv{Now: e.now}
	bos := ""
	if id := e.tok.BOS(); id >= 0 {
		bos = e.tok.Piece(id)
		env.BOS = bos
	}
	if id := e.tok.EOS(); id >= 0 {
		env.EOS = e.tok.Piece(id)
	}
	parts, err := e.jinja.RenderParts(msgs, true, env)
	if err != nil {
		return nil, false, fmt.Errorf("redrafter: the model's chat template: %w", err)
	}
	writesBOS := bos != "" && len(parts) > 0 && parts[0].Special && strings.HasPrefix(parts[0].Text, bos)
	return parts, writesBOS || !e.addBOS, nil
}
