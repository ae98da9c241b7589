// Command redrafter runs Llama-family language models on this machine and
// makes them faster with ReDrafter speculative decoding.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
)

// exitInterrupted is the shell's code for a command stopped by SIGINT
// (128 + 2), which scripts test for.
const exitInterrupted = 130

// errInterrupted is the cause of the command context's cancellation when
// the user presses Ctrl-C.
var errInterrupted = errors.New("interrupted")

func main() {
	os.Exit(runMain(os.Args[1:]))
}

// runMain runs the command line and returns the exit code: 0, 1 with a
// one-line "redrafter: ..." error on stderr, or 130 when Ctrl-C stopped it.
func runMain(args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	owner := new(interruptOwner)
	ctx = context.WithValue(ctx, interruptOwnerKey{}, owner)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	go func() {
		for range sigs {
			if !owner.taken.Load() {
				cancel(errInterrupted)
			}
		}
	}()
	cmd := newRootCmd()
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	signal.Stop(sigs)
	close(sigs)
	return exitCode(ctx, err)
}

// interruptOwner records that a command handles Ctrl-C itself (chat, where
// it stops a reply), so the command context is no longer cancelled by it.
type interruptOwner struct{ taken atomic.Bool }

type interruptOwnerKey struct{}

// takeInterrupts makes the running command the only receiver of Ctrl-C from
// now on. It reports false when Ctrl-C already cancelled ctx.
func takeInterrupts(ctx context.Context) bool {
	if owner, ok := ctx.Value(interruptOwnerKey{}).(*interruptOwner); ok {
		owner.taken.Store(true)
	}
	return ctx.Err() == nil
}

// exitCode prints err and returns the code it exits with.
func exitCode(ctx context.Context, err error) int {
	interrupted := errors.Is(context.Cause(ctx), errInterrupted)
	switch {
	case interrupted && (err == nil || errors.Is(err, context.Canceled)):
		fmt.Fprintln(os.Stderr, "redrafter: interrupted")
		return exitInterrupted
	case err != nil:
		// Errors of the redrafter package already start with its name.
		fmt.Fprintln(os.Stderr, "redrafter:", strings.TrimPrefix(err.Error(), "redrafter: "))
		return 1
	}
	return 0
}
