// Package picker runs the inference extension's own metrics scraper and
// extractor (its endpoint picker's) against `redrafter serve`. A package of
// its own in tests/deploy because it compiles some 600 packages of the
// picker's (controller-runtime, client-go, Prometheus' PromQL parser) that
// the manifest tests do not need: docs/DEPLOY.md gives the cost.
package picker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
)

const stories = "../../../models/stories260K/stories260K.gguf"

// bin is the redrafter binary built for this run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redrafter-picker-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "redrafter")
	build := exec.Command("go", "build", "-o", bin, "./cmd/redrafter")
	build.Dir = "../../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building redrafter:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// serve starts `redrafter serve` on a free loopback port and returns its
// address once the model is loaded.
func serve(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--backend", "cpu", "-m", stories, "--port", "0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var logs strings.Builder
	for sc.Scan() {
		logs.WriteString(sc.Text() + "\n")
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stderr)
			return m[1]
		}
	}
	t.Fatalf("serve never listened:\n%s", logs.String())
	return ""
}

// picker reads a replica's metrics as the inference gateway's endpoint
// picker does with its default configuration: the metrics data source
// polls /metrics, the core metrics extractor (default engine: vLLM's
// metric names) stores what it finds on the endpoint.
type picker struct {
	source    fwkdl.PollingDataSource
	extractor *extractormetrics.Extractor
	endpoint  *fwkdl.ModelServer
}

func newPicker(t *testing.T, addr string) *picker {
	t.Helper()
	src, err := sourcemetrics.NewHTTPMetricsDataSource("http", "/metrics", "redrafter")
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := extractormetrics.CoreMetricsExtractorFactory(extractormetrics.MetricsExtractorType, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{
		NamespacedName: types.NamespacedName{Namespace: "test", Name: "redrafter-0"},
		PodName:        "redrafter-0", Address: host, Port: port, MetricsHost: addr,
	}, fwkdl.NewMetrics())
	return &picker{source: src, extractor: plugin.(*extractormetrics.Extractor), endpoint: ep}
}

// scrape polls and extracts once. The only error the protocol allows is
// the missing LoRA family: redrafter serves no LoRA adapters, and the
// protocol asks for vllm:lora_requests_info only of servers that do.
func (p *picker) scrape(ctx context.Context) (*fwkdl.Metrics, error) {
	data, err := p.source.Poll(ctx, p.endpoint)
	if err != nil {
		return nil, err
	}
	if err := p.extractor.Extract(ctx, data, p.endpoint); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.Contains(line, "vllm:lora_requests_info") {
				return nil, fmt.Errorf("extract: %v", err)
			}
		}
	}
	return p.endpoint.GetMetrics().Clone(), nil
}

// The inference extension's own scraper and extractor read redrafter's
// gauges, without the API key (--public-metrics), and the values they
// parse track the server under a bounded loopback load: at most the slots
// running and the queue waiting, KV cache use in [0, running/slots] and
// non-zero exactly when a request runs, the slots saturated and the queue
// used at some point, and all of it back to zero at rest as /health says.
func TestPickerReadsMetrics(t *testing.T) {
	const slots, queue = 2, 4
	addr := serve(t, "--parallel", fmt.Sprint(slots), "--queue", fmt.Sprint(queue), "--context", "256", "--api-key", "k", "--public-metrics")
	url := "http://" + addr
	ctx := context.Background()
	p := newPicker(t, addr)

	m, err := p.scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.WaitingQueueSize != 0 || m.RunningRequestsSize != 0 || m.KVCacheUsagePercent != 0 {
		t.Errorf("at rest before any request: %+v", m)
	}
	if m.CacheBlockSize != 16 || m.CacheNumBlocks != slots*256/16 {
		t.Errorf("cache config: block size %d, blocks %d, want 16 and %d", m.CacheBlockSize, m.CacheNumBlocks, slots*256/16)
	}

	// Load: 6 clients, 8 requests each, as many at once as the slots and
	// the queue hold (a 429 would be the queue bound working, not a loss).
	var (
		wg            sync.WaitGroup
		ok, refused   atomic.Int64
		loadDone      atomic.Bool
		failures      sync.Map
		authorization = "Bearer k"
	)
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				body := fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":64,"seed":%d}`, c*100+i)
				req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(body))
				req.Header.Set("Authorization", authorization)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					failures.Store(err.Error(), true)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					refused.Add(1)
				default:
					failures.Store(resp.Status, true)
				}
			}
		}()
	}
	go func() { wg.Wait(); loadDone.Store(true) }()
	var maxRunning, maxWaiting, scrapes int
	for !loadDone.Load() {
		m, err := p.scrape(ctx)
		if err != nil {
			t.Fatal(err)
		}
		scrapes++
		maxRunning, maxWaiting = max(maxRunning, m.RunningRequestsSize), max(maxWaiting, m.WaitingQueueSize)
		if m.RunningRequestsSize < 0 || m.RunningRequestsSize > slots || m.WaitingQueueSize < 0 || m.WaitingQueueSize > queue ||
			m.KVCacheUsagePercent < 0 || m.KVCacheUsagePercent > float64(m.RunningRequestsSize)/slots ||
			(m.KVCacheUsagePercent > 0) != (m.RunningRequestsSize > 0) {
			t.Errorf("scrape %d: running %d, waiting %d, KV %v: outside what %d slots and a queue of %d allow",
				scrapes, m.RunningRequestsSize, m.WaitingQueueSize, m.KVCacheUsagePercent, slots, queue)
		}
		if m.WaitingQueueSize > 0 && m.RunningRequestsSize != slots {
			t.Errorf("scrape %d: %d waiting with %d of %d slots running", scrapes, m.WaitingQueueSize, m.RunningRequestsSize, slots)
		}
		time.Sleep(2 * time.Millisecond)
	}
	failures.Range(func(k, _ any) bool { t.Errorf("a request failed: %v", k); return true })
	if maxRunning != slots || maxWaiting == 0 {
		t.Errorf("over %d scrapes the picker saw at most %d running and %d waiting: the load never filled the slots and queue", scrapes, maxRunning, maxWaiting)
	}
	t.Logf("%d scrapes; %d requests answered, %d refused; max running %d, max waiting %d", scrapes, ok.Load(), refused.Load(), maxRunning, maxWaiting)

	m, err = p.scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var health struct {
		SlotsBusy int `json:"slots_busy"`
		Queued    int `json:"queued"`
	}
	json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if m.WaitingQueueSize != health.Queued || m.RunningRequestsSize != health.SlotsBusy || m.RunningRequestsSize != 0 || m.KVCacheUsagePercent != 0 {
		t.Errorf("at rest after the load: picker %+v, /health %+v, want all zero", m, health)
	}
	// The HPA's metric (deploy/kubernetes/base/hpa.yaml) is exported too.
	resp, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "\nredrafter_queue_depth ") {
		t.Error("/metrics has no redrafter_queue_depth, the HPA's metric")
	}
}
