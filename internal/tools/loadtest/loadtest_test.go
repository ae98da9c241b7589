package loadtest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
	"github.com/seed9b8f47b1/redrafter/internal/server"
)

// A bounded load against the server on the demo model with ReDrafter:
// every request succeeds with its tokens and the text it has alone,
// latencies are measured, the goroutines and the heap are back where they
// were once the load is over (the server still running), and once the
// server stops too.
func TestLoadNoFailuresNoLeaks(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := redrafter.Load("../../../models/stories260K/stories260K.gguf", redrafter.Options{Backend: "cpu", Context: 256, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.LoadDrafter("../../../models/stories260K/drafter"); err != nil {
		t.Fatal(err)
	}
	baseGoroutines := runtime.NumGoroutine()
	baseHeap := heapInUse()

	s, err := server.New(server.Config{Engine: e, ModelName: "stories", Template: tokenizer.TemplateVicuna, Parallel: 4, Queue: 64, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	servingHeap := heapInUse()
	const requests, maxTokens = 48, 24
	rep, err := Run(context.Background(), Config{URL: "http://" + ln.Addr().String(), Model: "stories", Clients: 8, Requests: requests,
		MaxTokens: maxTokens, Prompts: []string{"Once upon a time", "Lily and Tom went to the park."}, Timeout: 2 * time.Minute, Check: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Failed != 0 || rep.Tokens != requests*maxTokens || rep.TTFT.P50 <= 0 || rep.TPOT.P50 <= 0 || rep.TokensPerStep < 1 {
		t.Errorf("report %+v: want every request with its %d tokens, latencies and tokens per step", rep, maxTokens)
	}
	if rep.Checked != requests || rep.Mismatched != 0 {
		t.Errorf("%d of %d requests checked, %d differ from their text alone: %v", rep.Checked, requests, rep.Mismatched, rep.Errors)
	}
	// The server's own view (its /metrics; in this test it shares the
	// process): its goroutines came back to their count before the load.
	if st := rep.Server; st.GoroutinesBefore == 0 || st.GoroutinesAfter > st.GoroutinesBefore || st.HeapBefore == 0 {
		t.Errorf("server state %+v: want its goroutines back to their count before the load", st)
	}
	// With the server still running, the heap comes back near what it was
	// while serving nothing: the requests' buffers are garbage, and the
	// group frees its compiled passes once idle (redrafter.Group).
	h := heapInUse()
	for deadline := time.Now().Add(10 * time.Second); h > servingHeap+8<<20 && time.Now().Before(deadline); h = heapInUse() {
		time.Sleep(100 * time.Millisecond)
	}
	if h > servingHeap+8<<20 {
		t.Errorf("heap in use %d MiB after the load (server running), %d MiB before it", h>>20, servingHeap>>20)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	s.Close()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > baseGoroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseGoroutines {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the load, %d before:\n%s", n, baseGoroutines, buf[:runtime.Stack(buf, true)])
	}
	// The slots' caches are freed with the server: the heap is back near
	// its baseline (a margin for the runtime's own growth).
	if h := heapInUse(); h > baseHeap+8<<20 {
		t.Errorf("heap in use %d MiB after the load, %d MiB before", h>>20, baseHeap>>20)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestOnlyLoopback(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "http://192.168.1.2", "ftp://127.0.0.1"} {
		_, err := Run(context.Background(), Config{URL: u, Clients: 1, Requests: 1, MaxTokens: 1, Timeout: time.Second})
		if err == nil {
			t.Errorf("%s: accepted", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1:1", "http://localhost:1", "http://[::1]:1"} {
		rep, err := Run(context.Background(), Config{URL: u, Clients: 1, Requests: 1, MaxTokens: 1, Timeout: 5 * time.Second})
		if err != nil || rep.Failed != 1 || !strings.Contains(rep.Errors[0], "refused") && !strings.Contains(rep.Errors[0], "connect") {
			t.Errorf("%s: %v %+v, want one failed request (nothing listens there)", u, err, rep)
		}
	}
}
