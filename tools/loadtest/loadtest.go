// Package loadtest drives a redrafter server (or any OpenAI-compatible one)
// on this machine with concurrent streaming clients, for a fixed number of
// requests under a time limit, and reports throughput and latency: requests
// per second, aggregate tokens per second, time to first token and time per
// output token percentiles.
//
// It only talks to loopback addresses: a load test is for a server you run
// here, never for someone else's.
package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one load test.
type Config struct {
	URL       string        // the server's base URL, e.g. http://127.0.0.1:8080 (loopback only)
	APIKey    string        // sent as a bearer token when set
	Model     string        // the "model" field ("" leaves it out)
	Clients   int           // concurrent streaming clients (>= 1)
	Requests  int           // requests in all (>= Clients)
	MaxTokens int           // max_tokens of each request (>= 1)
	Prompts   []string      // completion prompts, used in turn (default: a few story openings)
	Timeout   time.Duration // the whole run's limit; requests still running then fail
}

// DefaultPrompts open stories, which the demo model continues at length.
var DefaultPrompts = []string{"Once upon a time", "Lily and Tom went to the park.", "One day, a little girl", "Tim had a big red ball", "The cat"}

// Report is what a run measured. Latencies are percentiles over requests.
type Report struct {
	Clients, Requests, Failed int
	Errors                    []string // the first few failures
	Tokens                    int      // completion tokens of the requests that succeeded
	Elapsed                   time.Duration
	RequestsPerSec            float64
	TokensPerSec              float64 // aggregate over all clients
	TTFT                      Percentiles
	TPOT                      Percentiles // time per output token after the first
	TokensPerStep             float64     // mean over requests that report ReDrafter steps (0: none)
}

// Percentiles of a latency.
type Percentiles struct{ P50, P90, P99, Max time.Duration }

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients, %d requests (%d failed) in %.2f s: %.2f requests/s, %.1f tokens/s aggregate (%d tokens)\n",
		r.Clients, r.Requests, r.Failed, r.Elapsed.Seconds(), r.RequestsPerSec, r.TokensPerSec, r.Tokens)
	fmt.Fprintf(&b, "time to first token:   p50 %s  p90 %s  p99 %s  max %s\n", ms(r.TTFT.P50), ms(r.TTFT.P90), ms(r.TTFT.P99), ms(r.TTFT.Max))
	fmt.Fprintf(&b, "time per output token: p50 %s  p90 %s  p99 %s  max %s\n", ms(r.TPOT.P50), ms(r.TPOT.P90), ms(r.TPOT.P99), ms(r.TPOT.Max))
	if r.TokensPerStep > 0 {
		fmt.Fprintf(&b, "ReDrafter: %.2f tokens per step\n", r.TokensPerStep)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "error: %s\n", e)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// checkLoopback refuses a URL whose host is not a loopback address.
func checkLoopback(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("loadtest: %q: want an http:// URL", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return u, nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("loadtest: %q is not a loopback address: load tests only run against a server on this machine (127.0.0.1, ::1, localhost)", host)
	}
	return u, nil
}

// Run runs the load test and reports it; it stops by itself after
// cfg.Requests requests or cfg.Timeout, whichever comes first, or when ctx
// ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	u, err := checkLoopback(cfg.URL)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Clients < 1:
		return nil, fmt.Errorf("loadtest: %d clients: want 1 or more", cfg.Clients)
	case cfg.Requests < cfg.Clients:
		return nil, fmt.Errorf("loadtest: %d requests for %d clients: want at least one each", cfg.Requests, cfg.Clients)
	case cfg.MaxTokens < 1:
		return nil, fmt.Errorf("loadtest: max tokens %d: want 1 or more", cfg.MaxTokens)
	case cfg.Timeout <= 0:
		return nil, errors.New("loadtest: a time limit is required")
	}
	prompts := cfg.Prompts
	if len(prompts) == 0 {
		prompts = DefaultPrompts
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	transport := &http.Transport{MaxIdleConnsPerHost: cfg.Clients, DisableCompression: true}
	client := &http.Client{Transport: transport}
	defer transport.CloseIdleConnections()
	endpoint := strings.TrimSuffix(u.String(), "/") + "/v1/completions"

	var (
		next    atomic.Int64
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Requests {
					return
				}
				r := one(ctx, client, endpoint, cfg, prompts[i%len(prompts)])
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	return summarize(cfg, results, elapsed), nil
}

// result is one request's measurements.
type result struct {
	err           error
	tokens        int
	ttft, tpot    time.Duration
	tokensPerStep float64
}

// one sends a streaming completion and times its events.
func one(ctx context.Context, client *http.Client, endpoint string, cfg Config, prompt string) result {
	body := map[string]any{"prompt": prompt, "max_tokens": cfg.MaxTokens, "temperature": 0, "stream": true,
		"stream_options": map[string]any{"include_usage": true}}
	if cfg.Model != "" {
		body["model"] = cfg.Model
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", endpoint, bytes.NewReader(b))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return result{err: fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))}
	}
	var r result
	var first, last time.Time
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ev struct {
			Choices []struct{ Text string }
			Usage   *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
			Redrafter *struct {
				TokensPerStep float64 `json:"tokens_per_step"`
			}
			Error *struct{ Message string }
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return result{err: fmt.Errorf("a bad event %q: %v", data, err)}
		}
		switch {
		case ev.Error != nil:
			return result{err: errors.New(ev.Error.Message)}
		case ev.Usage != nil:
			r.tokens = ev.Usage.CompletionTokens
		case len(ev.Choices) == 1 && ev.Choices[0].Text != "":
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
		}
		if ev.Redrafter != nil {
			r.tokensPerStep = ev.Redrafter.TokensPerStep
		}
	}
	if err := sc.Err(); err != nil {
		return result{err: err}
	}
	if !done {
		return result{err: errors.New("the stream ended without [DONE]")}
	}
	if !first.IsZero() {
		r.ttft = first.Sub(sent)
		if r.tokens > 1 {
			r.tpot = last.Sub(first) / time.Duration(r.tokens-1)
		}
	}
	return r
}

func summarize(cfg Config, results []result, elapsed time.Duration) *Report {
	rep := &Report{Clients: cfg.Clients, Requests: cfg.Requests, Elapsed: elapsed}
	var ttft, tpot []time.Duration
	var tps float64
	var drafted, ok int
	for _, r := range results {
		if r.err != nil {
			rep.Failed++
			if len(rep.Errors) < 5 {
				rep.Errors = append(rep.Errors, r.err.Error())
			}
			continue
		}
		ok++
		rep.Tokens += r.tokens
		ttft = append(ttft, r.ttft)
		if r.tokens > 1 {
			tpot = append(tpot, r.tpot)
		}
		if r.tokensPerStep > 0 {
			tps += r.tokensPerStep
			drafted++
		}
	}
	// Requests never started (the time limit came first) failed too.
	rep.Failed += cfg.Requests - len(results)
	if s := elapsed.Seconds(); s > 0 {
		rep.RequestsPerSec = float64(ok) / s
		rep.TokensPerSec = float64(rep.Tokens) / s
	}
	if drafted > 0 {
		rep.TokensPerStep = tps / float64(drafted)
	}
	rep.TTFT, rep.TPOT = percentiles(ttft), percentiles(tpot)
	return rep
}

// percentiles by nearest rank.
func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(p float64) time.Duration {
		i := int(p*float64(len(d))+0.999999) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return Percentiles{P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: d[len(d)-1]}
}
