// Command redrafter runs Llama-family language models on this machine and
// makes them faster with ReDrafter speculative decoding.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// stopSignals stop every command as Ctrl-C does: SIGTERM is what timeout,
// systemd and container runtimes send, SIGHUP what a closed terminal sends.
// Each is caught so that the command stops cleanly (its temporaries
// removed, its stats printed), where the default action would kill it.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// interruption is the cause of the command context's cancellation by a
// signal: the command exits with the shell's code for it, 128 + its number
// (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), which scripts test for.
type interruption struct{ sig os.Signal }

func (i interruption) Error() string {
	switch i.sig {
	case syscall.SIGTERM:
		return "stopped by SIGTERM"
	case syscall.SIGHUP:
		return "stopped by SIGHUP"
	}
	return "interrupted"
}

func (i interruption) exitCode() int {
	if n, ok := i.sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 130
}

func main() {
	os.Exit(runMain(os.Args[1:]))
}

// runMain runs the command line and returns the exit code: 0, 1 with a
// one-line "redrafter: ..." error on stderr, or 128 + the signal's number
// when a stop signal (Ctrl-C: 130) stopped it.
func runMain(args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	owner := new(interruptOwner)
	ctx = context.WithValue(ctx, interruptOwnerKey{}, owner)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	go func() {
		for sig := range sigs {
			if !owner.owns(sig) {
				cancel(interruption{sig})
			}
		}
	}()
	cmd := newRootCmd()
	cmd.SetArgs(args)
	out := &stdoutWriter{w: os.Stdout}
	cmd.SetOut(out)
	err := cmd.ExecuteContext(ctx)
	if werr := out.failed(); err == nil && werr != nil {
		err = fmt.Errorf("writing the output: %w", werr)
	}
	signal.Stop(sigs)
	close(sigs)
	return exitCode(ctx, err)
}

// stdoutWriter is every command's stdout. It keeps the first write error (a
// full disk, a closed pipe), which main reports with exit status 1: the
// commands print with fmt.Fprint and would otherwise exit 0 with their
// output lost.
type stdoutWriter struct {
	w   io.Writer
	mu  sync.Mutex
	err error
}

func (s *stdoutWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
	return n, err
}

func (s *stdoutWriter) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// isStdout reports whether w is the process's stdout, bare or as main
// wraps it.
func isStdout(w io.Writer) bool {
	if s, ok := w.(*stdoutWriter); ok {
		w = s.w
	}
	return w == io.Writer(os.Stdout)
}

// interruptOwner records the signals a command handles itself (chat's
// Ctrl-C stops a reply; serve shuts down cleanly), which then no longer
// cancel the command context.
type interruptOwner struct {
	mu    sync.Mutex
	taken []os.Signal
}

func (o *interruptOwner) owns(sig os.Signal) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.taken {
		if s == sig {
			return true
		}
	}
	return false
}

type interruptOwnerKey struct{}

// takeInterrupts makes the running command the only receiver of sigs from
// now on. It reports false when a signal already cancelled ctx.
func takeInterrupts(ctx context.Context, sigs ...os.Signal) bool {
	if owner, ok := ctx.Value(interruptOwnerKey{}).(*interruptOwner); ok {
		owner.mu.Lock()
		owner.taken = append(owner.taken, sigs...)
		owner.mu.Unlock()
	}
	return ctx.Err() == nil
}

// exitCode prints err and returns the code it exits with.
func exitCode(ctx context.Context, err error) int {
	var stop interruption
	interrupted := errors.As(context.Cause(ctx), &stop)
	switch {
	case interrupted && (err == nil || errors.Is(err, context.Canceled)):
		fmt.Fprintln(os.Stderr, "redrafter:", stop.Error())
		return stop.exitCode()
	case err != nil:
		// Errors of the redrafter package already start with its name.
		fmt.Fprintln(os.Stderr, "redrafter:", strings.TrimPrefix(err.Error(), "redrafter: "))
		return 1
	}
	return 0
}
