package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"

	"github.com/peterh/liner"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

const chatHelp = `Chat with a model in the terminal. Each turn renders the whole conversation
with the chat template; the session's KV cache keeps what the previous turns
computed, so a turn runs only its new tokens.

On a terminal, lines are edited as in a shell (arrows, Ctrl-A/E/K/U/W, Up and
Down for the history of this session, Ctrl-R to search it). A message may span
lines: end a line with \ to continue it, or open a block with """ and close it
with """. Piped input is read one message per line, lines of any length.

Keys:
  Ctrl-C    during a reply: stop it; the conversation goes on, and the part
            already shown stays in it (as llama.cpp keeps it). A reply stopped
            before its first word is dropped with its message.
            at the prompt: clear the line and show how to quit; a second
            Ctrl-C in a row quits.
  Ctrl-D    on an empty line: quit.

Commands (/help lists them):
` + chatCommandsHelp + `
When the next message and room for its reply (--max-tokens, at most a quarter
of the context) would not fit in the context, the oldest turns are dropped
(never the system prompt) until the conversation fills at most half of it, as
llama.cpp's context shift discards half; stderr says so the first time. The
cache is reused for the start of the conversation that did not change: the
system prompt.

--template auto renders the model's own Jinja chat template (GGUF
tokenizer.chat_template, or an HF checkpoint's chat_template); only a model
without one gets vicuna, with a warning. --template model insists on the
model's own; vicuna, llama2, chatml and llama3 are built-in templates.
Message text is plain text: only the template's markup becomes special
tokens. A reply ends at EOS, any control token, or an end-of-turn id the
model's metadata names. Sampling flags not given take the values of the
model's generation_config.json when it recommends sampling.`

func newChatCmd(g *globalFlags) *cobra.Command {
	var (
		m        modelFlags
		template string
		system   string
	)
	cmd := &cobra.Command{
		Use:   "chat --model PATH [--drafter DIR] [--template auto|model|vicuna|llama2|chatml|llama3]",
		Short: "Chat with a model in the terminal (Ctrl-C stops a reply, Ctrl-D or /bye quits, /help lists commands)",
		Long:  chatHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opt, err := m.options()
			if err != nil {
				return err
			}
			e, err := m.load(g)
			if err != nil {
				return err
			}
			defer e.Close()
			m.modelSampling(e, &opt)
			tmpl, err := chooseTemplate(template, e.ChatTemplate)
			if err != nil {
				return err
			}
			if w := templateWarning(template, e.ChatTemplate); w != "" {
				slog.Warn(w)
			}
			// Session.Chat parses the template's special tokens and gives a
			// template that writes BOS itself no second one.
			c, err := newChat(e, tmpl, system, opt, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer c.close()

			// Ctrl-C stops a reply, not the chat: from here on the chat takes
			// every Ctrl-C and main no longer cancels the command's context
			// for it. SIGTERM and SIGHUP still do: they end the chat.
			if !takeInterrupts(cmd.Context(), os.Interrupt) {
				return cmd.Context().Err() // Ctrl-C while the model loaded: the user left
			}
			interrupts := make(chan os.Signal, 1)
			signal.Notify(interrupts, os.Interrupt)
			defer signal.Stop(interrupts)
			in := cmd.InOrStdin()
			var r lineReader
			if useLiner(in, cmd.OutOrStdout()) {
				r = newLinerReader(cmd.Context())
			} else {
				var prompt io.Writer
				if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					// No line editing (stdout redirected, or TERM=dumb): the
					// terminal edits the line, the prompt goes to stderr.
					prompt = cmd.ErrOrStderr()
				}
				r = newPlainReader(cmd.Context(), in, prompt, interrupts)
			}
			defer r.close()
			return c.run(cmd.Context(), r, interrupts)
		},
	}
	m.register(cmd)
	cmd.Flags().StringVar(&template, "template", "auto", "chat template: auto (the model's own Jinja template; vicuna, with a warning, when it has none), model (its own, or an error), or a built-in: vicuna, llama2, chatml, llama3")
	cmd.Flags().StringVar(&system, "system", "", "system prompt (also /set system)")
	return cmd
}

// useLiner reports whether line editing can run: stdin and stdout are this
// process's own and both a terminal liner can drive.
func useLiner(in io.Reader, out io.Writer) bool {
	return in == io.Reader(os.Stdin) && isStdout(out) &&
		term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd())) && liner.TerminalSupported()
}

// chooseTemplate picks the chat template: the name given, or for auto the
// model's own (Jinja, from its metadata) when it has one, else vicuna (see
// templateWarning). A template the model has is never swapped for a guess.
func chooseTemplate(name, modelTemplate string) (string, error) {
	switch name {
	case "model", "vicuna", "llama2", "chatml", "llama3":
		return name, nil
	case "auto":
		if strings.TrimSpace(modelTemplate) != "" {
			return "model", nil
		}
		return "vicuna", nil
	}
	return "", fmt.Errorf("--template %q: want model, vicuna, llama2, chatml, llama3 or auto", name)
}

// chooseBuiltinTemplate is chooseTemplate for tools that can only render
// the built-in templates (distill): auto is the built-in the model's
// template matches, else vicuna.
func chooseBuiltinTemplate(name, modelTemplate string) (string, error) {
	switch name {
	case "vicuna", "llama2", "chatml", "llama3":
		return name, nil
	case "auto":
		if t := tokenizer.DetectTemplate(modelTemplate); t != "" {
			return t, nil
		}
		return "vicuna", nil
	}
	return "", fmt.Errorf("--template %q: want vicuna, llama2, chatml, llama3 or auto", name)
}

// templateWarning is the warning to give when chooseTemplate guesses
// vicuna for auto because the model has no template, or "".
func templateWarning(name, modelTemplate string) string {
	if name != "auto" || strings.TrimSpace(modelTemplate) != "" {
		return ""
	}
	return "the model has no chat template: guessing vicuna (choose with --template vicuna|llama2|chatml|llama3)"
}

// chat is one conversation over one Session.
type chat struct {
	e      *redrafter.Engine
	s      *redrafter.Session
	tmpl   string
	opt    redrafter.GenerateOptions
	system string
	// turns are the messages after the system prompt, user and assistant
	// alternating, oldest first: what the model sees of the conversation.
	turns []redrafter.Message
	// last is the last reply's result, for /stats (nil before the first,
	// or when a stopped reply came back without one); lastStopped says
	// that reply was stopped by Ctrl-C.
	last        *redrafter.Result
	lastStopped bool
	// dropped counts turns dropped to fit the context.
	dropped     int
	out, errOut io.Writer
}

func newChat(e *redrafter.Engine, tmpl, system string, opt redrafter.GenerateOptions, out, errOut io.Writer) (*chat, error) {
	s, err := e.NewSession()
	if err != nil {
		return nil, err
	}
	return &chat{e: e, s: s, tmpl: tmpl, opt: opt, system: system, out: out, errOut: errOut}, nil
}

func (c *chat) close() { c.s.Close() }

// run reads messages and commands until the end of the input, /bye, or a
// second Ctrl-C at the prompt. interrupts carries Ctrl-C while a reply is
// being generated (and, for plain input, while it waits for a line).
func (c *chat) run(ctx context.Context, r lineReader, interrupts <-chan os.Signal) error {
	endPrompt := func() {
		if w := r.promptOut(); w != nil {
			fmt.Fprintln(w)
		}
	}
	interrupted := false // the last prompt ended with Ctrl-C
	for {
		drain(interrupts) // a Ctrl-C pressed as a reply ended is spent
		text, err := readMessage(r)
		switch {
		case err == io.EOF:
			endPrompt()
			return nil
		case errors.Is(err, errUnfinished):
			endPrompt()
			fmt.Fprintln(c.errOut, "the input ended inside a multi-line message: that message was not sent")
			return nil
		case errors.Is(err, errPromptInterrupted):
			if interrupted {
				return nil
			}
			interrupted = true
			fmt.Fprintln(c.errOut, "(press Ctrl-C again or Ctrl-D or /bye to quit)")
			continue
		case errors.Is(err, errLineTooLong):
			fmt.Fprintln(c.errOut, err)
			continue
		case err != nil:
			return err
		}
		interrupted = false
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		if strings.HasPrefix(text, "/") && !strings.Contains(text, "\n") {
			if quit := c.command(text); quit {
				return nil
			}
			continue
		}
		if err := c.turn(ctx, text, interrupts); err != nil {
			return err
		}
	}
}

func drain(ch <-chan os.Signal) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// turn sends one user message and streams the reply. A message that cannot
// fit in the context is refused with a message and the chat goes on; Ctrl-C
// stops the reply and the chat goes on; any other error ends the chat.
func (c *chat) turn(ctx context.Context, text string, interrupts <-chan os.Signal) error {
	user := redrafter.Message{Role: "user", Content: text}
	msgs, err := c.fit(user)
	if err != nil {
		var tooLong *messageTooLongError
		if errors.As(err, &tooLong) {
			fmt.Fprintln(c.errOut, err)
			return nil
		}
		return err
	}
	// A Ctrl-C that came before the reply (as the last one ended, or in
	// the moment liner shows its prompt before it reads keys) is not meant
	// for this reply.
	drain(interrupts)
	turnCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	replyDone := make(chan struct{})
	go func() {
		select {
		case <-interrupts:
			cancel()
		case <-replyDone:
		}
	}()
	var shown strings.Builder
	res, err := c.s.Chat(turnCtx, msgs, redrafter.ChatOptions{Template: c.tmpl, GenerateOptions: c.opt}, func(t string) error {
		shown.WriteString(t)
		_, err := fmt.Fprint(c.out, t)
		return err
	})
	close(replyDone)
	fmt.Fprintln(c.out)
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() == nil {
			// Stopped by Ctrl-C. The session's cache holds the prompt and
			// the tokens decided so far, so the next turn reuses it.
			c.last, c.lastStopped = res, true
			if reply := strings.TrimSpace(shown.String()); reply != "" {
				c.turns = append(c.turns, redrafter.Message{Role: "assistant", Content: reply})
			} else {
				c.turns = c.turns[:len(c.turns)-1]
			}
			return nil
		}
		c.turns = c.turns[:len(c.turns)-1]
		return err
	}
	c.last, c.lastStopped = res, false
	c.turns = append(c.turns, redrafter.Message{Role: "assistant", Content: strings.TrimSpace(res.Text)})
	return nil
}

// messageTooLongError is a message that does not fit in the context even
// alone; it is not sent and nothing is dropped for it.
type messageTooLongError struct{ tokens, context int }

func (e *messageTooLongError) Error() string {
	return fmt.Sprintf("this message is %d tokens with the template and system prompt, more than the context holds (%d): not sent (a larger --context may help)",
		e.tokens, e.context)
}

// replyRoom is how many tokens the next reply should have room for:
// --max-tokens, at most a quarter of the context.
func (c *chat) replyRoom() int {
	room := c.e.Context() / 4
	if c.opt.MaxTokens > 0 && c.opt.MaxTokens < room {
		room = c.opt.MaxTokens
	}
	return room
}

// messages is the conversation Session.Chat gets: the system prompt, if
// any, and turns.
func (c *chat) messages(turns []redrafter.Message) []redrafter.Message {
	msgs := make([]redrafter.Message, 0, len(turns)+1)
	if c.system != "" {
		msgs = append(msgs, redrafter.Message{Role: "system", Content: c.system})
	}
	return append(msgs, turns...)
}

// count is the length in tokens of the conversation of the system prompt
// and turns, as Session.Chat will run it.
func (c *chat) count(turns []redrafter.Message) (int, error) {
	ids, err := c.e.ChatTokens(c.messages(turns), c.tmpl)
	return len(ids), err
}

// fit appends the user message to the turns, dropping the oldest turns when
// the conversation and room for the reply would not fit in the context, and
// returns the messages to send.
func (c *chat) fit(user redrafter.Message) ([]redrafter.Message, error) {
	ctxLen := c.e.Context()
	n, err := c.count([]redrafter.Message{user})
	if err != nil {
		return nil, err
	}
	if n >= ctxLen {
		return nil, &messageTooLongError{n, ctxLen}
	}
	with := func(kept []redrafter.Message) []redrafter.Message {
		return append(append(make([]redrafter.Message, 0, len(kept)+1), kept...), user)
	}
	if len(c.turns) > 0 {
		if n, err = c.count(with(c.turns)); err != nil {
			return nil, err
		}
	}
	if n+c.replyRoom() <= ctxLen || len(c.turns) == 0 {
		c.turns = with(c.turns)
		return c.messages(c.turns), nil
	}
	// Drop the fewest oldest turns (user and reply) that bring the
	// conversation down to half the context, or all of them. Each count
	// encodes the conversation, so search rather than drop one at a time.
	old := len(c.turns) / 2
	var failed error
	drop := 1 + sort.Search(old, func(i int) bool {
		n, err := c.count(with(c.turns[2*(i+1):]))
		if err != nil && failed == nil {
			failed = err
		}
		return n <= ctxLen/2
	})
	if failed != nil {
		return nil, failed
	}
	drop = min(drop, old)
	c.turns = with(c.turns[2*drop:])
	if c.dropped == 0 {
		fmt.Fprintf(c.errOut, "context full: dropped the oldest %s (the context holds %d tokens); older turns are dropped as needed from now on\n",
			plural(drop, "turn"), ctxLen)
	} else {
		slog.Debug("context full: dropped the oldest turns", "turns", drop, "context", ctxLen)
	}
	c.dropped += drop
	return c.messages(c.turns), nil
}

// plural is "1 turn" or "n turns".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
