package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/peterh/liner"
)

// errPromptInterrupted is Ctrl-C at the prompt.
var errPromptInterrupted = errors.New("interrupted at the prompt")

// errUnfinished is the end of input inside a multi-line message.
var errUnfinished = errors.New("the input ended inside a multi-line message")

// lineReader reads what the user types, one line at a time.
type lineReader interface {
	// readLine shows prompt (when there is someone to see it) and returns
	// one line without its line ending; io.EOF at the end of the input
	// (Ctrl-D on an empty line), errPromptInterrupted for Ctrl-C at the prompt.
	readLine(prompt string) (string, error)
	// remember adds a line the user entered to the history that Up recalls.
	remember(line string)
	// promptOut is where the prompt goes, to end its line when the chat
	// ends; nil when no prompt is shown (piped input).
	promptOut() io.Writer
	close() error
}

// linerReader edits lines on a terminal with github.com/peterh/liner: arrow
// keys, history, Ctrl-R search, and a 2 MB paste in seconds (liner appends
// at the end of the line without copying it per key). It needs the process's
// own stdin and stdout to be that terminal: it writes the prompt to stdout.
type linerReader struct {
	st    *liner.State
	ctx   context.Context // the command's: SIGTERM and SIGHUP cancel it
	state atomic.Int32    // linerIdle, linerPrompting or linerExiting
}

const (
	linerIdle = iota
	linerPrompting
	linerExiting
)

func newLinerReader(ctx context.Context) *linerReader {
	st := liner.NewLiner()
	// Ctrl-C at the prompt returns to us, so that a second one can quit.
	st.SetCtrlCAborts(true)
	r := &linerReader{st: st, ctx: ctx}
	go r.exitOnStop()
	return r
}

// exitOnStop ends the process when SIGTERM or SIGHUP cancels ctx while the
// user is at the prompt, where liner reads the terminal and cannot be
// interrupted: it restores the terminal's mode and exits as main would.
// During a reply the cancelled context ends the chat the ordinary way.
func (r *linerReader) exitOnStop() {
	<-r.ctx.Done()
	if r.state.CompareAndSwap(linerPrompting, linerExiting) {
		r.st.Close()
		fmt.Println()
		os.Exit(exitCode(r.ctx, r.ctx.Err()))
	}
}

func (r *linerReader) readLine(prompt string) (string, error) {
	if !r.state.CompareAndSwap(linerIdle, linerPrompting) {
		select {} // exitOnStop is ending the process
	}
	if err := r.ctx.Err(); err != nil {
		r.state.Store(linerIdle)
		return "", err
	}
	line, err := r.st.Prompt(prompt)
	if !r.state.CompareAndSwap(linerPrompting, linerIdle) {
		select {}
	}
	if errors.Is(err, liner.ErrPromptAborted) {
		return "", errPromptInterrupted
	}
	return line, err
}

func (r *linerReader) remember(line string) {
	if strings.TrimSpace(line) != "" {
		r.st.AppendHistory(line)
	}
}

func (r *linerReader) promptOut() io.Writer { return os.Stdout }
func (r *linerReader) close() error         { return r.st.Close() }

// plainReader reads lines from a pipe, a file, or a terminal in its own
// line mode (no history then). Lines have no length limit below
// maxMessageBytes: a 2 MB paste is one message, not the end of the chat.
// A goroutine reads ahead so that an interrupt (Ctrl-C on a terminal)
// reaches readLine while it waits for input.
type plainReader struct {
	lines      chan lineResult
	done       chan struct{}
	stop       <-chan struct{} // the command context's end (SIGTERM, SIGHUP)
	interrupts <-chan os.Signal
	prompt     io.Writer // nil: no prompt (the input is not a terminal)
}

type lineResult struct {
	line string
	err  error
}

// maxMessageBytes bounds one line of piped input, so that a stream with no
// newline in it (a binary file) cannot take all memory.
const maxMessageBytes = 64 << 20

// errLineTooLong reports a line over maxMessageBytes; the line is skipped.
var errLineTooLong = fmt.Errorf("a line of input is longer than %d MiB: skipped", maxMessageBytes>>20)

func newPlainReader(ctx context.Context, in io.Reader, prompt io.Writer, interrupts <-chan os.Signal) *plainReader {
	r := &plainReader{lines: make(chan lineResult), done: make(chan struct{}), stop: ctx.Done(), interrupts: interrupts, prompt: prompt}
	go r.readAll(bufio.NewReaderSize(in, 64<<10))
	return r
}

func (r *plainReader) readAll(br *bufio.Reader) {
	defer close(r.lines) // readLine then returns io.EOF
	for {
		line, err := readLongLine(br, maxMessageBytes)
		select {
		case r.lines <- lineResult{line, err}:
		case <-r.done:
			return
		}
		if err != nil && err != errLineTooLong {
			return
		}
	}
}

// readLongLine reads one line of any length up to max bytes (a longer one
// is read to its end and reported as errLineTooLong). The last line may
// lack its newline.
func readLongLine(br *bufio.Reader, max int) (string, error) {
	var b []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(b)+len(chunk) > max {
				tooLong, b = true, nil
			} else {
				b = append(b, chunk...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && (len(b) > 0 || tooLong):
		case err != nil:
			return "", err
		}
		if tooLong {
			return "", errLineTooLong
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
}

func (r *plainReader) readLine(prompt string) (string, error) {
	if r.prompt != nil {
		fmt.Fprint(r.prompt, prompt)
	}
	select {
	case res, ok := <-r.lines:
		if !ok {
			return "", io.EOF
		}
		return res.line, res.err
	case <-r.interrupts:
		if r.prompt != nil {
			fmt.Fprintln(r.prompt) // the terminal echoed ^C without ending the line
		}
		return "", errPromptInterrupted
	case <-r.stop:
		return "", context.Canceled
	}
}

func (r *plainReader) remember(string)      {}
func (r *plainReader) promptOut() io.Writer { return r.prompt }
func (r *plainReader) close() error {
	close(r.done)
	return nil
}

// Prompts: the first line of a message, and the lines that continue it.
const (
	promptFirst = ">>> "
	promptMore  = "... "
)

// readMessage reads one message: a line; lines joined by a backslash at
// the end of each but the last; or a block between two """ (as ollama:
// it opens at the start of a line and closes at the end of one). Lines of a
// message are joined with newlines. Every line read goes to the history.
func readMessage(r lineReader) (string, error) {
	line, err := r.readLine(promptFirst)
	if err != nil {
		return "", err
	}
	r.remember(line)
	var b strings.Builder
	more := func() (string, error) {
		line, err := r.readLine(promptMore)
		if err == io.EOF {
			return "", errUnfinished
		}
		if err == nil {
			r.remember(line)
		}
		return line, err
	}
	if rest, ok := strings.CutPrefix(line, `"""`); ok {
		for {
			if body, ok := strings.CutSuffix(rest, `"""`); ok {
				b.WriteString(body)
				return b.String(), nil
			}
			b.WriteString(rest)
			b.WriteByte('\n')
			if rest, err = more(); err != nil {
				return "", err
			}
		}
	}
	for {
		body, ok := strings.CutSuffix(line, `\`)
		if !ok {
			b.WriteString(line)
			return b.String(), nil
		}
		b.WriteString(body)
		b.WriteByte('\n')
		if line, err = more(); err != nil {
			return "", err
		}
	}
}
