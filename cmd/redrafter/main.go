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
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	go func() {
		if _, ok := <-sigs; ok {
			cancel(errInterrupted)
		}
	}()
	cmd := newRootCmd()
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	signal.Stop(sigs)
	close(sigs)
	return exitCode(ctx, err)
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
