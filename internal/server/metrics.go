package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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
