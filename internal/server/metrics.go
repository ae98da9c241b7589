package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed9b8f47b1/redrafter"
)

// metrics are the server's Prometheus series, in a registry of its own so
// that several servers in one process (tests) do not collide.
type metrics struct {
	reg            *prometheus.Registry
	requests       *prometheus.CounterVec // by endpoint and status code
	generations    *prometheus.CounterVec // by finish reason (stop, length, canceled, error)
	promptTokens   prometheus.Counter
	cachedTokens   prometheus.Counter
	genTokens      prometheus.Counter
	draftSteps     prometheus.Counter
	draftTokens    prometheus.Counter
	draftAccepted  prometheus.Counter
	draftOffered   prometheus.Counter
	tokensPerStep  prometheus.Histogram
	queueDepth     prometheus.Gauge
	slotsBusy      prometheus.Gauge
	ttft           prometheus.Histogram
	perToken       prometheus.Histogram
	requestSeconds *prometheus.HistogramVec
}

func newMetrics(slots int) *metrics {
	latency := prometheus.ExponentialBuckets(0.001, 2, 16) // 1 ms to 33 s
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrafter_http_requests_total", Help: "HTTP requests answered, by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrafter_generations_total", Help: "Generations finished, by finish reason (stop, length, canceled, error).",
		}, []string{"reason"}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redrafter_prompt_tokens_total", Help: "Prompt tokens of generations, cached ones included.",
		}),
		cachedTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redrafter_prompt_cached_tokens_total", Help: "Prompt tokens found in a slot's cache and not run again.",
		}),
		genTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redrafter_generated_tokens_total", Help: "Tokens generated.",
		}),
		draftSteps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redrafter_redrafter_steps_total", Help: "ReDrafter verification passes.",
		}),
		draftTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redrafter_redrafter_tokens_total", Help: "Tokens emitted by ReDrafter verification passes.",
		}),
		draftAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redrafter_redrafter_accepted_drafts_total", Help: "Draft tokens accepted (acceptance = accepted / offered).",
		}),
		draftOffered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redrafter_redrafter_offered_drafts_total", Help: "Draft tokens that could have been accepted: L-1 per pass.",
		}),
		tokensPerStep: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redrafter_tokens_per_step", Help: "Tokens per verification pass of each ReDrafter generation.",
			Buckets: []float64{1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 8},
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redrafter_queue_depth", Help: "Requests waiting for a slot.",
		}),
		slotsBusy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redrafter_slots_busy", Help: "Slots decoding a request.",
		}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redrafter_time_to_first_token_seconds", Help: "From a request's arrival (queueing included) to its first generated text.",
			Buckets: latency,
		}),
		perToken: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redrafter_time_per_output_token_seconds", Help: "Decode time per generated token, one observation per generation.",
			Buckets: latency,
		}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redrafter_request_duration_seconds", Help: "Time to answer a generation request, by endpoint.",
			Buckets: latency,
		}, []string{"endpoint"}),
	}
	slotsTotal := prometheus.NewGauge(prometheus.GaugeOpts{Name: "redrafter_slots", Help: "Slots (--parallel)."})
	slotsTotal.Set(float64(slots))
	m.reg.MustRegister(m.requests, m.generations, m.promptTokens, m.cachedTokens, m.genTokens,
		m.draftSteps, m.draftTokens, m.draftAccepted, m.draftOffered, m.tokensPerStep,
		m.queueDepth, m.slotsBusy, slotsTotal, m.ttft, m.perToken, m.requestSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// metricsHandler answers GET /metrics in Prometheus text.
func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// observe records a finished generation.
func (m *metrics) observe(reason string, promptTokens, cached int, res *redrafter.Result, firstText time.Duration) {
	m.generations.WithLabelValues(reason).Inc()
	m.promptTokens.Add(float64(promptTokens))
	m.cachedTokens.Add(float64(cached))
	if res == nil {
		return
	}
	st := res.Stats
	m.genTokens.Add(float64(st.GeneratedTokens))
	if firstText > 0 {
		m.ttft.Observe(firstText.Seconds())
	}
	if st.GeneratedTokens > 0 && st.Decode > 0 {
		m.perToken.Observe(st.Decode.Seconds() / float64(st.GeneratedTokens))
	}
	if d := st.Draft; d != nil && d.Steps > 0 {
		m.draftSteps.Add(float64(d.Steps))
		m.draftTokens.Add(float64(d.Tokens))
		m.tokensPerStep.Observe(d.TokensPerStep())
		accepted, offered := draftCounts(st)
		m.draftAccepted.Add(float64(accepted))
		m.draftOffered.Add(float64(offered))
	}
}

// draftCounts are a ReDrafter generation's accepted drafts and the drafts
// its passes offered (L-1 each, for the L of each pass: under load the
// group shortens beams).
func draftCounts(st redrafter.Stats) (accepted, offered int) {
	d := st.Draft
	for n, steps := range d.AcceptHist {
		accepted += n * steps
	}
	return accepted, d.Offered
}

// The gauges of the model-server protocol of the Kubernetes Gateway API
// Inference Extension (docs/proposals/003-model-server-protocol), which its
// endpoint picker scrapes to route each request to a replica. They carry
// vLLM's names, the picker's defaults (its vllm engine mapping and its
// --total-queued-requests-metric, --total-running-requests-metric,
// --kv-cache-usage-percentage-metric and --cache-info-metric flags), so a
// pool of redrafter replicas needs no picker configuration. docs/DEPLOY.md
// gives the version followed.
const (
	protoWaiting     = "vllm:num_requests_waiting"
	protoRunning     = "vllm:num_requests_running"
	protoKVUsage     = "vllm:kv_cache_usage_perc"
	protoCacheConfig = "vllm:cache_config_info"
)

// kvBlockTokens is the block size reported in vllm:cache_config_info. A
// slot's KV cache is one contiguous allocation, and a cached prefix is
// reused to the token, so any block size describes it truly; the picker's
// prefix scorer hashes prompts in blocks of this many tokens and sizes its
// per-replica index by num_gpu_blocks, the slots' capacity in such blocks.
const kvBlockTokens = 16

// protocolCollector reads the scheduler once per scrape, so the three gauges
// of one scrape are one consistent state (a busy slot's tokens are never
// counted without the slot, nor the other way round).
type protocolCollector struct {
	sched                      *scheduler
	capacity                   int64 // tokens: slots × context
	waiting, running, kv, info *prometheus.Desc
	blockSize, numBlocks       string
}

func newProtocolCollector(sched *scheduler, slots, context int) *protocolCollector {
	capacity := int64(slots) * int64(context)
	return &protocolCollector{
		sched: sched, capacity: capacity,
		waiting: prometheus.NewDesc(protoWaiting, "Requests waiting in the queue for a slot (model-server protocol: TotalQueuedRequests).", nil, nil),
		running: prometheus.NewDesc(protoRunning, "Requests holding a slot: prefilling or decoding (model-server protocol: TotalRunningRequests).", nil, nil),
		kv: prometheus.NewDesc(protoKVUsage, "Fraction (0 to 1) of the slots' KV cache capacity (slots × context tokens) "+
			"held by the requests running; an idle slot's cached prefix counts as free (model-server protocol: KVCacheUtilization).", nil, nil),
		info: prometheus.NewDesc(protoCacheConfig, "KV cache layout for the inference gateway's prefix scorer: "+
			"block_size tokens per block, num_gpu_blocks blocks in all slots (value always 1).", []string{"block_size", "num_gpu_blocks"}, nil),
		blockSize: fmt.Sprint(kvBlockTokens),
		numBlocks: fmt.Sprint(capacity / kvBlockTokens),
	}
}

func (c *protocolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.waiting
	ch <- c.running
	ch <- c.kv
	ch <- c.info
}

func (c *protocolCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.sched.load()
	usage := 0.0
	if c.capacity > 0 {
		usage = min(1, float64(l.heldTokens)/float64(c.capacity))
	}
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(l.queued))
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(l.busy))
	ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, usage)
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, c.blockSize, c.numBlocks)
}
