package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape parses /metrics as Prometheus text, as the inference gateway's
// endpoint picker does.
func (ts *testServer) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := parseMetrics(strings.NewReader(ts.metricsText(t)))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func gauge(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil || f.GetType() != dto.MetricType_GAUGE || len(f.GetMetric()) != 1 {
		t.Fatalf("%s: %v, want one gauge", name, f)
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

// The model-server protocol's gauges under vLLM's names: requests waiting,
// requests holding a slot, and the fraction of the slots' KV capacity their
// tokens hold, read in one consistent state; an idle slot's cached prefix
// counts as free.
func TestProtocolGauges(t *testing.T) {
	ts := start(t, Config{Parallel: 2, Queue: 2})
	capacity := float64(2 * testContext)
	release := make(chan struct{})
	var holding sync.WaitGroup
	holding.Add(2)
	acquired := 0
	var mu sync.Mutex
	ts.testAcquired = func(ctx context.Context) {
		mu.Lock()
		acquired++
		first := acquired <= 2
		mu.Unlock()
		if first { // the first two requests hold both slots
			holding.Done()
			<-release
		}
	}
	// Prompts of known lengths: BOS + their tokens.
	prompts := []string{"Once upon a time", "Lily", "The dog ran"}
	lens := make([]int, len(prompts))
	for i, p := range prompts {
		lens[i] = len(plain.Tokenizer().Encode(p, true))
	}
	results := make(chan int, len(prompts))
	post := func(p string) {
		status, _, _, err := ts.tryPost("/v1/completions", map[string]any{"prompt": p, "max_tokens": 8, "temperature": 0})
		if err != nil {
			t.Error(err)
		}
		results <- status
	}
	go post(prompts[0])
	go post(prompts[1])
	holding.Wait()
	go post(prompts[2])
	waitFor(t, "two decoding and one queued", func() bool { busy, queued := ts.health(t); return busy == 2 && queued == 1 })

	fams := ts.scrape(t)
	if got := gauge(t, fams, "vllm:num_requests_waiting"); got != 1 {
		t.Errorf("waiting %v, want 1", got)
	}
	if got := gauge(t, fams, "vllm:num_requests_running"); got != 2 {
		t.Errorf("running %v, want 2", got)
	}
	if got, want := gauge(t, fams, "vllm:kv_cache_usage_perc"), float64(lens[0]+lens[1])/capacity; got != want {
		t.Errorf("KV usage %v, want %v (the two prompts' %d+%d tokens of %v)", got, want, lens[0], lens[1], capacity)
	}
	info := fams["vllm:cache_config_info"]
	if info == nil || len(info.GetMetric()) != 1 || info.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("cache_config_info: %v", info)
	}
	labels := map[string]string{}
	for _, l := range info.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["block_size"] != "16" || labels["num_gpu_blocks"] != "32" {
		t.Errorf("cache_config_info labels %v, want block_size 16, num_gpu_blocks 2×256/16", labels)
	}

	close(release)
	for range prompts {
		if s := <-results; s != 200 {
			t.Errorf("status %d", s)
		}
	}
	fams = ts.scrape(t)
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"} {
		if got := gauge(t, fams, name); got != 0 {
			t.Errorf("%s at rest: %v, want 0 (idle slots' caches are free)", name, got)
		}
	}
}

// While a request generates, its slot holds its prompt and every token
// generated so far but the newest (its keys and values are computed by the
// next step): at its k-th piece of text (a piece is one token or more), at
// least prompt+k-1 tokens, and never more than prompt+max_tokens.
func TestProtocolKVUsageGrows(t *testing.T) {
	ts := start(t, Config{Parallel: 2})
	const prompt, maxTokens = "Once upon a time", 40
	n := float64(len(plain.Tokenizer().Encode(prompt, true)))
	var (
		mu     sync.Mutex
		usages []float64
		errs   []error
	)
	ts.testText = func(ctx context.Context) {
		fams, err := ts.tryScrape()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		usages = append(usages, fams["vllm:kv_cache_usage_perc"].GetMetric()[0].GetGauge().GetValue()*2*testContext)
	}
	status, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0})
	if status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	if len(errs) > 0 || len(usages) < 5 {
		t.Fatalf("scrapes during the generation: %v, %d readings", errs, len(usages))
	}
	for k, tokens := range usages {
		if tokens < n+float64(k) || tokens > n+maxTokens {
			t.Errorf("text %d: the slot holds %v tokens by the KV gauge, want %v to %v", k+1, tokens, n+float64(k), n+maxTokens)
		}
	}
}

func (ts *testServer) tryScrape() (map[string]*dto.MetricFamily, error) {
	status, _, b, err := ts.tryDo("GET", "/metrics", nil)
	if err != nil {
		return nil, err
	}
	if status != 200 {
		return nil, fmt.Errorf("metrics: %d", status)
	}
	return parseMetrics(bytes.NewReader(b))
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(r)
}
