// Command redrafter runs Llama-family language models on this machine and
// makes them faster with ReDrafter speculative decoding.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redrafter:", err)
		os.Exit(1)
	}
}
