package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"golang.org/x/term"
)

// progressLogEvery is how often a long command logs its progress when
// stderr is not a terminal (a log file, CI): often enough to show it is
// alive, rarely enough to stay readable.
const progressLogEvery = 5 * time.Second

// progressLine shows the progress of a long command: on a terminal, one
// line rewritten in place; otherwise an slog line (info level, the
// default) at the first update, every progressLogEvery and at the last.
type progressLine struct {
	w     io.Writer
	what  string // the log message: the command's name
	tty   bool
	now   func() time.Time
	last  time.Time
	shown bool
}

func newProgressLine(w io.Writer, what string) *progressLine {
	f, ok := w.(*os.File)
	return &progressLine{w: w, what: what, tty: ok && term.IsTerminal(int(f.Fd())), now: time.Now}
}

// update shows line (or logs attrs) unless the last update was too recent;
// force (the last update) always shows it.
func (p *progressLine) update(force bool, line string, attrs ...any) {
	every := progressLogEvery
	if p.tty {
		every = 100 * time.Millisecond
	}
	now := p.now()
	if !force && !p.last.IsZero() && now.Sub(p.last) < every {
		return
	}
	p.last = now
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	slog.Info(p.what, attrs...)
}

// finish ends the terminal line.
func (p *progressLine) finish() {
	if p.tty && p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}
