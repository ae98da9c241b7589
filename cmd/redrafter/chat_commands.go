package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// chatCommandsHelp is what /help prints (and the command's help shows).
const chatCommandsHelp = `  /help, /?                 this list
  /bye, /exit               quit
  /clear                    forget the conversation (the system prompt stays)
  /stats                    the last reply's tokens, speeds and ReDrafter acceptance
  /set                      show the sampling settings
  /set temperature X        0 or more (0: greedy)
  /set top_p X              in [0, 1] (0: the most probable token only)
  /set top_k N              0 or more (0: all tokens)
  /set seed N               0 or more, or -1 for a fresh random seed
  /set system "TEXT"        a new system prompt ("" removes it)
A message that starts with / can be sent inside a """ block.
`

// command runs a /command line and reports whether the chat should end.
// Mistakes get a message on stderr; the chat goes on.
func (c *chat) command(line string) (quit bool) {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/bye", "/exit":
		return true
	case "/help", "/?":
		fmt.Fprint(c.errOut, chatCommandsHelp)
	case "/clear":
		c.turns = nil
		fmt.Fprintln(c.errOut, "conversation cleared")
	case "/stats":
		c.printStats()
	case "/set":
		if err := c.set(arg); err != nil {
			fmt.Fprintln(c.errOut, err)
		}
	default:
		fmt.Fprintf(c.errOut, "unknown command %s (/help lists the commands)\n", name)
	}
	return false
}

func (c *chat) printStats() {
	if c.last == nil {
		if c.lastStopped {
			fmt.Fprintln(c.errOut, "the last reply was stopped before it had statistics")
		} else {
			fmt.Fprintln(c.errOut, "no reply yet")
		}
		return
	}
	if c.lastStopped {
		fmt.Fprintln(c.errOut, "the last reply was stopped by Ctrl-C:")
	}
	printStats(c.errOut, c.last, c.e)
	fmt.Fprintf(c.errOut, "context: %d of %d tokens cached; %s in the conversation", len(c.s.Tokens()), c.e.Context(), plural(len(c.turns)/2, "turn"))
	if c.dropped > 0 {
		fmt.Fprintf(c.errOut, ", %d dropped to fit", c.dropped)
	}
	fmt.Fprintln(c.errOut)
}

// set runs /set NAME VALUE.
func (c *chat) set(arg string) error {
	name, value, _ := strings.Cut(arg, " ")
	value = strings.TrimSpace(value)
	p := &c.opt.Sampling
	switch name {
	case "":
		fmt.Fprintf(c.errOut, "temperature %g, top_p %g, top_k %d, seed %d, system %q\n", p.Temperature, p.TopP, p.TopK, c.opt.Seed, c.system)
		return nil
	case "system":
		if unq, err := strconv.Unquote(value); err == nil && strings.HasPrefix(value, `"`) {
			value = unq
		}
		c.system = strings.TrimSpace(value)
		if c.system == "" {
			fmt.Fprintln(c.errOut, "system prompt removed")
		} else {
			fmt.Fprintln(c.errOut, "system prompt set")
		}
		return nil
	}
	if value == "" {
		return fmt.Errorf("/set %s: give a value (/help lists them)", name)
	}
	switch name {
	case "temperature", "temp":
		x, err := parseFloat(value)
		if err != nil || x < 0 {
			return fmt.Errorf("/set temperature: %q: want a number, 0 or more (0: greedy)", value)
		}
		p.Temperature = float32(x)
	case "top_p", "top-p":
		x, err := parseFloat(value)
		if err != nil || !(x >= 0 && x <= 1) {
			return fmt.Errorf("/set top_p: %q: want a number in [0, 1] (0: the most probable token only)", value)
		}
		p.TopP, p.TopPSet = float32(x), true
	case "top_k", "top-k":
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return fmt.Errorf("/set top_k: %q: want a whole number, 0 or more (0: all tokens)", value)
		}
		p.TopK = n
	case "seed":
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < -1 {
			return fmt.Errorf("/set seed: %q: want a whole number, 0 or more, or -1 for a fresh random seed", value)
		}
		if n < 0 {
			c.opt.Seed = randomSeed()
		} else {
			c.opt.Seed = uint64(n)
		}
	default:
		return fmt.Errorf("/set %s: unknown setting (want temperature, top_p, top_k, seed or system)", name)
	}
	fmt.Fprintf(c.errOut, "%s set to %s\n", name, value)
	return nil
}

// parseFloat parses a finite float32 value (NaN and Inf are refused).
func parseFloat(s string) (float64, error) {
	x, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%q is not finite", s)
	}
	return x, nil
}
