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
	"strconv"
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
	// Check sends each prompt once alone before the load and counts the
	// requests under load whose text differs from it (greedy decoding must
	// not depend on who shares the server's passes).
	Check bool
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
	// Checked is how many requests were compared with their prompt's text
	// alone (Config.Check), Mismatched how many differed.
	Checked, Mismatched int
	// Server is the server's own process (its /metrics, when it exports the
	// Go collector's): goroutines and heap in use before the load and once
	// it is over. Zero when the server does not export them.
	Server ServerState
}

// ServerState is what a server's /metrics says about its process.
type ServerState struct {
	GoroutinesBefore, GoroutinesAfter int
	HeapBefore, HeapAfter             int64 // go_memstats_heap_inuse_bytes
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
	if r.Checked > 0 {
		fmt.Fprintf(&b, "greedy text equal to the prompt's text alone: %d of %d requests\n", r.Checked-r.Mismatched, r.Checked)
	}
	if st := r.Server; st.GoroutinesBefore > 0 {
		fmt.Fprintf(&b, "server: %d goroutines before the load, %d after; heap in use %.1f MiB before, %.1f MiB after\n",
			st.GoroutinesBefore, st.GoroutinesAfter, float64(st.HeapBefore)/(1<<20), float64(st.HeapAfter)/(1<<20))
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
	base := strings.TrimSuffix(u.String(), "/")
	endpoint := base + "/v1/completions"

	// The texts alone come first, one request at a time.
	alone := map[string]string{}
	if cfg.Check {
		for _, p := range prompts {
			if _, ok := alone[p]; ok {
				continue
			}
			r := one(ctx, client, endpoint, cfg, p)
			if r.err != nil {
				return nil, fmt.Errorf("loadtest: %q alone: %w", p, r.err)
			}
			alone[p] = r.text
		}
	}
	before, haveState := scrape(ctx, client, base, cfg.APIKey)

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
				r.prompt = prompts[i%len(prompts)]
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep := summarize(cfg, results, elapsed)
	if cfg.Check {
		for _, r := range results {
			if r.err == nil {
				rep.Checked++
				if r.text != alone[r.prompt] {
					rep.Mismatched++
					if len(rep.Errors) < 5 {
						rep.Errors = append(rep.Errors, fmt.Sprintf("%q under load: %q, alone: %q", r.prompt, r.text, alone[r.prompt]))
					}
				}
			}
		}
	}
	if haveState {
		rep.Server = settle(ctx, client, base, cfg.APIKey, before)
	}
	return rep, nil
}

// settleTime bounds the wait, once the load is over, for the server's
// goroutines to come back to their count before it (its handlers end after
// the last byte is sent; idle keep-alive connections are closed here
// first) and its heap in use to come back within heapSlack of its size
// before (redrafter serve collects after 3 s at rest).
const (
	settleTime = 10 * time.Second
	heapSlack  = 8 << 20
)

// settle reads the server's state once it is back where it was before the
// load, or settleTime has passed.
func settle(ctx context.Context, client *http.Client, base, key string, before ServerState) ServerState {
	if t, ok := client.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	st := before
	deadline := time.Now().Add(settleTime)
	for {
		now, ok := scrape(ctx, client, base, key)
		if ok {
			st.GoroutinesAfter, st.HeapAfter = now.GoroutinesBefore, now.HeapBefore
		}
		back := st.GoroutinesAfter <= before.GoroutinesBefore && st.HeapAfter <= before.HeapBefore+heapSlack
		if !ok || back || time.Now().After(deadline) || ctx.Err() != nil {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrape reads go_goroutines and go_memstats_heap_inuse_bytes from the
// server's /metrics (into the Before fields); ok is false when it has
// neither. The scrape's own connection is closed, so it leaves no
// goroutine behind on the server.
func scrape(ctx context.Context, client *http.Client, base, key string) (st ServerState, ok bool) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	if err != nil {
		return st, false
	}
	req.Close = true
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, false
	}
	var goroutines, heap bool
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, found := strings.Cut(sc.Text(), " ")
		if !found {
			continue
		}
		switch name {
		case "go_goroutines":
			n, err := strconv.ParseFloat(value, 64)
			st.GoroutinesBefore, goroutines = int(n), err == nil
		case "go_memstats_heap_inuse_bytes":
			n, err := strconv.ParseFloat(value, 64)
			st.HeapBefore, heap = int64(n), err == nil
		}
	}
	return st, goroutines && heap
}

// result is one request's measurements.
type result struct {
	prompt, text  string
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
			r.text += ev.Choices[0].Text
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
