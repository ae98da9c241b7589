package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/tools/loadtest"
)

func newLoadtestCmd() *cobra.Command {
	var cfg loadtest.Config
	cmd := &cobra.Command{
		Use:   "loadtest [--url http://127.0.0.1:8080] [--clients N] [--requests N] [--max-tokens N]",
		Short: "Load a redrafter serve on this machine with concurrent streaming clients and report throughput and latency",
		Long: `Send --requests streaming completions (greedy, --max-tokens each) from --clients
concurrent clients to a server on this machine (loopback addresses only), and
report requests/s, aggregate tokens/s, and time to first token and time per
output token percentiles. It stops by itself after the requests or --timeout,
whichever comes first; requests that fail or never started are counted.
With --check, each prompt is first sent alone and every request under load
must return the same text (greedy decoding does not depend on the load).
When the server exports Go's metrics (redrafter serve does), its goroutines
and heap in use before and after the load are reported too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := loadtest.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), rep)
			if rep.Failed > 0 {
				return fmt.Errorf("%d of %d requests failed", rep.Failed, rep.Requests)
			}
			if rep.Mismatched > 0 {
				return fmt.Errorf("%d of %d requests under load differ from their prompt's text alone", rep.Mismatched, rep.Checked)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "the server's base URL (loopback only)")
	f.StringVar(&cfg.APIKey, "api-key", envvar.APIKey.Get(), "the server's API key (env "+envvar.APIKey.Name()+")")
	f.StringVar(&cfg.Model, "model-name", "", "the \"model\" of each request (default: none, the server's own)")
	f.IntVar(&cfg.Clients, "clients", 4, "concurrent streaming clients")
	f.IntVar(&cfg.Requests, "requests", 32, "requests in all")
	f.IntVar(&cfg.MaxTokens, "max-tokens", 64, "max_tokens of each request")
	f.StringArrayVar(&cfg.Prompts, "prompt", nil, "completion prompt, used in turn (repeatable; default: a few story openings)")
	f.BoolVar(&cfg.Check, "check", false, "send each prompt alone first and fail if a request under load returns other text")
	f.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "time limit of the whole run")
	return cmd
}
