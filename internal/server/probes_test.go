package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// get answers a probe: its status and the status word of its body.
func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body probeStatus
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &body)
	return resp.StatusCode, body.Status
}

func complete(url, prompt string) (int, string, error) {
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"`+prompt+`","max_tokens":5,"temperature":0}`))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// A process's probes through its life: live and not ready while the model
// loads (other requests refused with 503 and Retry-After), ready once the
// Server is attached, not ready while every slot is busy and the queue is
// full (UnreadyWhenFull), and not ready while draining, when requests are
// still accepted for the drain delay and the one in flight finishes before
// Serve returns nil.
func TestFrontProbes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	f := NewFront(FrontConfig{DrainDelay: 2 * time.Second, UnreadyWhenFull: true, Logger: slogTo(io.Discard)})
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, ln) }()

	if status, word := probe(t, url+"/livez"); status != 200 || word != "alive" {
		t.Errorf("livez while loading: %d %q", status, word)
	}
	if status, word := probe(t, url+"/readyz"); status != 503 || word != "loading" {
		t.Errorf("readyz while loading: %d %q, want 503 loading", status, word)
	}
	if status, word := probe(t, url+"/health"); status != 503 || word != "loading" {
		t.Errorf("health while loading: %d %q, want 503 loading", status, word)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "model_loading") {
		t.Errorf("a completion while loading: %d %s", resp.StatusCode, b)
	}

	srv, err := New(Config{Engine: plain, ModelName: "stories", Template: tokenizer.TemplateVicuna, Parallel: 1, Queue: 1, Logger: slogTo(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hold := make(chan struct{})
	var holding sync.WaitGroup
	holding.Add(1)
	var once sync.Once
	srv.testAcquired = func(ctx context.Context) {
		once.Do(func() { holding.Done(); <-hold }) // the first request holds the only slot
	}
	f.Attach(srv)
	if status, word := probe(t, url+"/readyz"); status != 200 || word != "ready" {
		t.Errorf("readyz once attached: %d %q", status, word)
	}

	results := make(chan int, 3)
	send := func(prompt string) {
		status, body, err := complete(url, prompt)
		if err != nil || status != 200 {
			t.Errorf("%q: %d %s %v", prompt, status, body, err)
		}
		results <- status
	}
	go send("Once")
	holding.Wait()
	if status, word := probe(t, url+"/readyz"); status != 200 {
		t.Errorf("readyz with the slot busy and room in the queue: %d %q, want 200", status, word)
	}
	go send("Lily")
	waitFor(t, "the second request queued", func() bool { _, queued := srv.sched.busy(); return queued == 1 })
	if status, word := probe(t, url+"/readyz"); status != 503 || word != "full" {
		t.Errorf("readyz with the slot busy and the queue full: %d %q, want 503 full", status, word)
	}

	stop() // SIGTERM
	if status, word := probe(t, url+"/readyz"); status != 503 || word != "draining" {
		t.Errorf("readyz once draining: %d %q, want 503 draining", status, word)
	}
	if status, word := probe(t, url+"/livez"); status != 200 {
		t.Errorf("livez while draining: %d %q", status, word)
	}
	close(hold)
	for range 2 {
		<-results
	}
	// Still accepted during the drain delay.
	go send("Tom")
	<-results
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve still running 20 s after its context ended")
	}
	if _, err := http.Get(url + "/livez"); err == nil {
		t.Error("the port still answers after Serve returned")
	}
}

// /metrics answered by the Front without the key (PublicMetrics) keeps the
// Server's Host rule: a DNS-rebinding page cannot read it by a foreign name,
// while Prometheus scraping the pod's address can; the probes answer any Host.
func TestFrontPublicMetricsHost(t *testing.T) {
	f := NewFront(FrontConfig{PublicMetrics: true, Logger: slogTo(io.Discard)})
	srv, err := New(Config{Engine: plain, ModelName: "stories", Template: tokenizer.TemplateVicuna, Parallel: 1, Queue: 1, APIKey: "k", Logger: slogTo(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	f.Attach(srv)
	for _, c := range []struct {
		path, host string
		want       int
	}{
		{"/metrics", "10.1.2.3:8080", 200},
		{"/metrics", "evil.example:8080", 403},
		{"/readyz", "evil.example:8080", 200},
		{"/livez", "evil.example:8080", 200},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		r.Host = c.host
		w := httptest.NewRecorder()
		f.Handler().ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("GET %s with Host %s: %d, want %d: %s", c.path, c.host, w.Code, c.want, w.Body)
		}
	}
}
