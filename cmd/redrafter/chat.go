package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/model/tokenizer"
)

func newChatCmd(g *globalFlags) *cobra.Command {
	var (
		m        modelFlags
		template string
		system   string
	)
	cmd := &cobra.Command{
		Use:   "chat --model PATH [--drafter DIR] [--template vicuna|llama2|chatml|llama3|auto]",
		Short: "Chat with a model in the terminal (one line per message; Ctrl-C stops a reply, Ctrl-D quits)",
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
			tmpl, err := chooseTemplate(template, e.ChatTemplate)
			if err != nil {
				return err
			}
			// The rendered conversation carries the special tokens; templates
			// that write BOS themselves must not get a second one.
			opt.ParseSpecial = true
			opt.NoBOS = tokenizer.TemplateAddsBOS(tmpl)
			return chatLoop(cmd.Context(), e, tmpl, system, opt, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	m.register(cmd)
	cmd.Flags().StringVar(&template, "template", "auto", "chat template: vicuna, llama2, chatml, llama3, or auto (from the model's metadata)")
	cmd.Flags().StringVar(&system, "system", "", "system prompt")
	return cmd
}

func chooseTemplate(name, modelTemplate string) (string, error) {
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

// chatLoop reads one user message per line. The session keeps the KV cache
// between turns, so each turn runs only the newly rendered tokens.
func chatLoop(ctx context.Context, e *redrafter.Engine, tmpl, system string, opt redrafter.GenerateOptions,
	in io.Reader, out, errOut io.Writer) error {
	s, err := e.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	interactive := false
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		interactive = true
	}
	var msgs []tokenizer.Message
	if system != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: system})
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for {
		if interactive {
			fmt.Fprint(errOut, ">>> ")
		}
		if !sc.Scan() {
			return sc.Err()
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: line})
		prompt, err := tokenizer.RenderChat(tmpl, msgs, true)
		if err != nil {
			return err
		}
		turnCtx, cancel := signal.NotifyContext(ctx, os.Interrupt)
		res, err := s.Generate(turnCtx, prompt, opt, func(t string) error {
			_, err := fmt.Fprint(out, t)
			return err
		})
		cancel()
		fmt.Fprintln(out)
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				msgs = msgs[:len(msgs)-1] // the interrupted turn is dropped
				continue
			}
			return err
		}
		msgs = append(msgs, tokenizer.Message{Role: "assistant", Content: strings.TrimSpace(res.Text)})
	}
}
