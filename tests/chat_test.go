//go:build linux || darwin

package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// ptyChat is `redrafter chat` on a pseudo-terminal, as a person runs it:
// stdin, stdout and stderr are the terminal.
type ptyChat struct {
	t      *testing.T
	cmd    *exec.Cmd
	tty    *os.File // the terminal's master side: what we type, what it shows
	mu     sync.Mutex
	shown  []byte
	change chan struct{}
	exited chan error
}

// How long any one thing the chat should do may take before the test fails;
// generous, because the machine may be busy. Nothing waits this long when
// the chat behaves.
const chatWait = 30 * time.Second

func startChat(t *testing.T, args ...string) *ptyChat {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"chat", "--backend", "cpu", "--model", stories}, args...)...)
	// A terminal liner can drive, and a home of our own in case anything
	// would be written there.
	cmd.Env = append(os.Environ(), "TERM=xterm", "HOME="+t.TempDir())
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	c := &ptyChat{t: t, cmd: cmd, tty: tty, change: make(chan struct{}, 1), exited: make(chan error, 1)}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := tty.Read(buf)
			c.mu.Lock()
			c.shown = append(c.shown, buf[:n]...)
			c.mu.Unlock()
			select {
			case c.change <- struct{}{}:
			default:
			}
			if err != nil {
				return // EIO once the chat has exited
			}
		}
	}()
	go func() { c.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		tty.Close()
	})
	c.waitAtPrompt(0)
	return c
}

// waitAtPrompt waits until the chat shows its prompt after from and reads
// keys there. liner prints the prompt a moment before it turns the
// terminal's signals off, and a Ctrl-C typed in between would be a signal,
// not a key; so this also waits until the terminal's ISIG is off.
func (c *ptyChat) waitAtPrompt(from int) {
	c.t.Helper()
	c.waitFor(from, regexp.MustCompile(`>>> `))
	deadline := time.Now().Add(chatWait)
	for {
		tio, err := unix.IoctlGetTermios(int(c.tty.Fd()), ioctlGetTermios)
		if err != nil {
			c.t.Fatal(err)
		}
		if tio.Lflag&unix.ISIG == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the terminal's signals stayed on at the prompt; it showed:\n%q", c.since(0))
		}
		time.Sleep(time.Millisecond) // polls a condition; nothing to wait on
	}
}

// mark is where the screen's text ends now.
func (c *ptyChat) mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.shown)
}

func (c *ptyChat) since(from int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.shown[from:])
}

// waitFor waits until re matches what the terminal showed after from, and
// returns the offset just past the match.
func (c *ptyChat) waitFor(from int, re *regexp.Regexp) int {
	c.t.Helper()
	deadline := time.After(chatWait)
	for {
		if loc := re.FindStringIndex(c.since(from)); loc != nil {
			return from + loc[1]
		}
		select {
		case <-c.change:
		case err := <-c.exited:
			c.exited <- err
			c.t.Fatalf("the chat exited (%v) while the test waited for %q; the terminal showed:\n%q", err, re, c.since(0))
		case <-deadline:
			c.t.Fatalf("waited %v for %q; the terminal showed:\n%q", chatWait, re, c.since(0))
		}
	}
}

func (c *ptyChat) typeKeys(keys string) {
	c.t.Helper()
	if _, err := c.tty.Write([]byte(keys)); err != nil {
		c.t.Fatal(err)
	}
}

var (
	lineEnd    = regexp.MustCompile(`\r\n`)
	nextPrompt = regexp.MustCompile(`\r\n>>> `)
	replyStart = regexp.MustCompile(`\r\n *[A-Za-z]`)
)

// send types keys ending with Enter and returns the reply: what the terminal
// showed between the end of the typed line and the next prompt.
func (c *ptyChat) send(keys string) string {
	c.t.Helper()
	from := c.mark()
	c.typeKeys(keys)
	start := c.waitFor(from, lineEnd)
	end := c.waitFor(start, nextPrompt)
	reply := c.since(start)[:end-start-len(">>> ")]
	c.waitAtPrompt(start)
	return strings.TrimSpace(strings.ReplaceAll(reply, "\r", ""))
}

// quit presses keys at the prompt that should end the chat: it ends its
// line and exits 0.
func (c *ptyChat) quit(keys string) {
	c.t.Helper()
	from := c.mark()
	c.typeKeys(keys)
	select {
	case err := <-c.exited:
		if err != nil {
			c.t.Fatalf("%q: the chat exited with %v; the terminal showed:\n%q", keys, err, c.since(0))
		}
	case <-time.After(chatWait):
		c.t.Fatalf("%q did not end the chat; the terminal showed:\n%q", keys, c.since(0))
	}
	c.waitFor(from, lineEnd) // the last line was ended
	c.t.Logf("the terminal showed:\n%q", c.since(0))
}

// slowDrafter is a random draft head whose drafts are nearly all rejected:
// with 50 beams of 20 tokens, every token costs a forward pass over a tree
// of up to 951 tokens, so the demo model's replies here (60-70 tokens) take
// about 2 s instead of 7 ms, long enough to press Ctrl-C in the middle of
// one. The text is still greedy decoding's.
func slowDrafter(t *testing.T) []string {
	dir := t.TempDir()
	h := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1)
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	return []string{"--drafter", dir, "--beam-width", "50", "--beam-length", "20"}
}

// Ctrl-C in the middle of a reply stops it and the chat goes on: the next
// message gets a reply. Ctrl-C at the empty prompt shows how to quit, and a
// second one quits with exit status 0.
func TestChatTerminalCtrlCStopsTheReply(t *testing.T) {
	c := startChat(t, append(slowDrafter(t), "--template", "vicuna", "--max-tokens", "2000")...)
	for _, msg := range []string{"Tell me a story", "Tell me another one"} {
		from := c.mark()
		c.typeKeys(msg + "\r")
		c.waitFor(from, replyStart)
		c.typeKeys("\x03")
		c.waitAtPrompt(c.waitFor(from, lineEnd))
		if strings.Contains(c.since(from), "press Ctrl-C again") {
			t.Fatalf("the reply to %q ended before Ctrl-C, which then reached the prompt:\n%q", msg, c.since(from))
		}
	}
	from := c.mark()
	c.typeKeys("\x03")
	c.waitAtPrompt(c.waitFor(from, regexp.MustCompile(`press Ctrl-C again or Ctrl-D or /bye to quit`)))
	c.quit("\x03")
}

// Up recalls a line: after /clear, Up Up Enter sends the first message
// again, and greedy decoding gives the same reply to the same conversation.
// Arrow keys never reach the model.
func TestChatTerminalHistory(t *testing.T) {
	c := startChat(t, "--template", "vicuna", "--max-tokens", "24")
	first := c.send("Tell me a story\r")
	if first == "" {
		t.Fatal("no reply")
	}
	c.send("/clear\r")
	again := c.send("\x1b[A\x1b[A\r")
	if again != first {
		t.Errorf("Up Up Enter after /clear replied\n%q\nwant the reply to the recalled message\n%q", again, first)
	}
	c.quit("\x04") // Ctrl-D
}

// A chat longer than the context keeps going: with a context of 256
// tokens, the oldest turns are dropped and the terminal says so once.
func TestChatTerminalLongerThanContext(t *testing.T) {
	c := startChat(t, "--template", "vicuna", "--context", "256", "--max-tokens", "64")
	for range 10 {
		if reply := c.send("Tell me a story about a cat\r"); reply == "" {
			t.Fatal("a turn got no reply")
		}
	}
	if n := strings.Count(c.since(0), "context full: dropped the oldest"); n != 1 {
		t.Errorf("the terminal said the context was full %d times, want once:\n%q", n, c.since(0))
	}
	c.quit("\x04") // Ctrl-D
}

// runChatPiped runs chat with stdin from a pipe.
func runChatPiped(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"chat", "--backend", "cpu", "--model", stories}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// A 2 MB line of piped input does not end the chat: too long for the
// context, it is refused for its turn, and the next message gets a reply.
// The model has no chat template: vicuna is guessed, with a warning.
func TestChatPipedLongLineAndGuessedTemplate(t *testing.T) {
	long := strings.Repeat("Once upon a time there was a cat. ", 2<<20/34)
	out, stderr, err := runChatPiped(t, long+"\nTell me a story\n", "--max-tokens", "16")
	var exit *exec.ExitError
	if errors.As(err, &exit) || err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "not sent") || strings.TrimSpace(out) == "" {
		t.Errorf("stdout %q\nstderr %q", out, stderr)
	}
	if strings.Count(stderr, "guessing vicuna") != 1 {
		t.Errorf("want one warning that vicuna is guessed, stderr:\n%s", stderr)
	}
}
