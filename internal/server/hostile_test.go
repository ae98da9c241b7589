package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// waitFor polls cond until it holds; a bound on waiting, not a timing
// assertion: the condition must become true, however long it takes within
// the bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (ts *testServer) health(t *testing.T) (busy, queued int) {
	t.Helper()
	status, _, b := ts.do(t, "GET", "/health", nil)
	h := decode[struct {
		Status            string
		SlotsBusy, Queued int `json:"-"`
	}](t, b)
	var raw map[string]any
	json.Unmarshal(b, &raw)
	if status != 200 || h.Status != "ok" {
		t.Fatalf("health: %d %s", status, b)
	}
	return int(raw["slots_busy"].(float64)), int(raw["queued"].(float64))
}

// stillServes checks the server answers a real generation correctly.
func (ts *testServer) stillServes(t *testing.T) {
	t.Helper()
	want := greedy(t, ts.e, "Once upon a time", 12, false).Text
	status, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})
	if r := decode[chatResult](t, b); status != 200 || len(r.Choices) != 1 || r.Choices[0].Text != want {
		t.Errorf("the server no longer serves: %d %s, want %q", status, b, want)
	}
}

// Every bad request gets its status and OpenAI's error body, and the
// server keeps serving.
func TestBadRequests(t *testing.T) {
	ts := start(t, Config{})
	long := strings.Repeat("Once upon a time there was a cat. ", 60)
	huge := `{"prompt":"` + strings.Repeat("a", 10<<20) + `"}`
	for _, c := range []struct {
		name, path, body string
		status           int
		code, inMessage  string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages": [`, 400, "", "malformed JSON"},
		{"not JSON", "/v1/completions", `prompt=hello`, 400, "", "malformed JSON"},
		{"empty body", "/v1/completions", ``, 400, "", "empty"},
		{"two values", "/v1/completions", `{"prompt":"a"} {}`, 400, "", "more than one"},
		{"an array body", "/v1/completions", `[1,2]`, 400, "", "JSON object"},
		{"max_tokens a string", "/v1/completions", `{"prompt":"a","max_tokens":"ten"}`, 400, "", "max_tokens: want an integer"},
		{"max_tokens 1e30", "/v1/completions", `{"prompt":"a","max_tokens":1e30}`, 400, "", "max_tokens"},
		{"max_tokens negative", "/v1/completions", `{"prompt":"a","max_tokens":-1}`, 400, "", "want at least 1"},
		{"temperature a string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, 400, "", "temperature: want a number"},
		{"temperature 5", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":5}`, 400, "", "temperature"},
		{"top_p 2", "/v1/completions", `{"prompt":"a","top_p":2}`, 400, "", "top_p"},
		{"messages an object", "/v1/chat/completions", `{"messages":{"role":"user"}}`, 400, "", "messages: want an array"},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, 400, "", "at least one"},
		{"a tool role", "/v1/chat/completions", `{"messages":[{"role":"tool","content":"x"}]}`, 400, "", "tool"},
		{"an image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "", "image_url"},
		{"two users in a row", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, 400, "", "alternate"},
		{"n 2", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "", "n: only 1"},
		{"logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true}`, 400, "", "logprobs"},
		{"tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`, 400, "", "tools"},
		{"stop a number", "/v1/completions", `{"prompt":"a","stop":7}`, 400, "", "stop"},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, 400, "", "prompt"},
		{"a token-array prompt", "/v1/completions", `{"prompt":[1,2,3]}`, 400, "", "prompt"},
		{"an unknown model", "/v1/completions", `{"model":"gpt-4o","prompt":"a"}`, 404, "model_not_found", "gpt-4o"},
		{"a prompt over the context", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "context_length_exceeded", fmt.Sprintf("the context holds %d", testContext)},
		{"a 10 MB body", "/v1/completions", huge, 413, "request_too_large", "larger than"},
		{"an unknown route", "/v1/embeddings", `{}`, 404, "not_found", "no route"},
		{"a wrong method", "/v1/models", `{}`, 405, "method_not_allowed", "GET"},
	} {
		status, h, b := ts.post(t, c.path, c.body)
		var e struct {
			Error struct {
				Message, Type string
				Code          *string
			}
		}
		err := json.Unmarshal(b, &e)
		code := ""
		if e.Error.Code != nil {
			code = *e.Error.Code
		}
		if status != c.status || err != nil || h.Get("Content-Type") != "application/json" || e.Error.Type == "" ||
			!strings.Contains(e.Error.Message, c.inMessage) || c.code != "" && code != c.code {
			t.Errorf("%s: %d %s, want %d with code %q and %q in the message", c.name, status, b, c.status, c.code, c.inMessage)
		}
	}
	// A prompt over the context names both numbers.
	_, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": long})
	n := len(plain.Tokenizer().Encode(long, true))
	if !strings.Contains(string(b), fmt.Sprintf("the prompt is %d tokens; the context holds %d", n, testContext)) {
		t.Errorf("over the context: %s, want the prompt's %d tokens and the context's %d", b, n, testContext)
	}
	// A huge max_tokens is capped by the context: the reply ends when the
	// context is full, with finish_reason length (or earlier, at EOS).
	status, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 1 << 40, "temperature": 0})
	if r := decode[chatResult](t, b); status != 200 || r.Usage == nil || r.Usage.TotalTokens > testContext {
		t.Errorf("max_tokens 2^40: %d %s", status, b)
	}
	ts.stillServes(t)
}

func TestAPIKey(t *testing.T) {
	ts := start(t, Config{APIKey: "s3cret"})
	for _, c := range []struct {
		method, path string
		header       []string
		status       int
	}{
		{"GET", "/v1/models", nil, 401},
		{"GET", "/v1/models", []string{"Authorization", "Bearer wrong"}, 401},
		{"GET", "/v1/models", []string{"Authorization", "Bearer s3cret0"}, 401},
		{"GET", "/v1/models", []string{"Authorization", "s3cret"}, 401},
		{"GET", "/v1/models", []string{"Authorization", "Bearer s3cret"}, 200},
		{"GET", "/metrics", nil, 401},
		{"POST", "/tokenize", nil, 401},
		{"GET", "/nowhere", nil, 401}, // the key before the route: routes are not probed without it
		{"GET", "/health", nil, 200},
	} {
		status, h, b := ts.do(t, c.method, c.path, strings.NewReader(`{"content":"a"}`), c.header...)
		if status != c.status {
			t.Errorf("%s %s %v: %d %s, want %d", c.method, c.path, c.header, status, b, c.status)
		}
		if status == 401 && (h.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"invalid_api_key"`)) {
			t.Errorf("%s %s: 401 without OpenAI's error body: %s", c.method, c.path, b)
		}
	}
}

func TestCORS(t *testing.T) {
	ts := start(t, Config{CORSOrigins: []string{"http://localhost:3000"}})
	_, h, _ := ts.do(t, "GET", "/v1/models", nil, "Origin", "http://localhost:3000")
	if h.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("an allowed origin got Access-Control-Allow-Origin %q", h.Get("Access-Control-Allow-Origin"))
	}
	_, h, _ = ts.do(t, "GET", "/v1/models", nil, "Origin", "http://evil.example")
	if h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin got Access-Control-Allow-Origin %q", h.Get("Access-Control-Allow-Origin"))
	}
	status, h, _ := ts.do(t, "OPTIONS", "/v1/chat/completions", nil, "Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST")
	if status != 204 || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight from an allowed origin: %d %v", status, h)
	}
	if status, _, _ := ts.do(t, "OPTIONS", "/v1/chat/completions", nil, "Origin", "http://evil.example", "Access-Control-Request-Method", "POST"); status != 403 {
		t.Errorf("preflight from another origin: %d, want 403", status)
	}
	none := start(t, Config{})
	if _, h, _ := none.do(t, "GET", "/v1/models", nil, "Origin", "http://localhost:3000"); h.Get("Access-Control-Allow-Origin") != "" {
		t.Error("CORS headers without --cors-origin")
	}
}

// With every slot busy, requests wait in the queue up to its size; the
// next is refused at once with 429, and the waiting ones are served.
func TestQueueFull(t *testing.T) {
	ts := start(t, Config{Parallel: 1, Queue: 1})
	release := make(chan struct{})
	var holds sync.Once
	ts.testAcquired = func(ctx context.Context) {
		holds.Do(func() { <-release }) // the first request holds the slot
	}
	results := make(chan int, 2)
	for range 2 {
		go func() {
			// Off the test's goroutine: errors are reported, never t.Fatal.
			status, _, _, err := ts.tryPost("/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 5})
			if err != nil {
				t.Error(err)
			}
			results <- status
		}()
	}
	waitFor(t, "one decoding and one queued", func() bool { busy, queued := ts.health(t); return busy == 1 && queued == 1 })
	status, h, b := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 5})
	if status != 429 || h.Get("Retry-After") == "" || !strings.Contains(string(b), "server_busy") {
		t.Errorf("a request beyond the queue: %d %s, want 429 with Retry-After", status, b)
	}
	if m := ts.metricsText(t); !strings.Contains(m, "redrafter_queue_depth 1") {
		t.Errorf("metrics while one waits:\n%s", grep(m, "queue"))
	}
	close(release)
	for range 2 {
		if s := <-results; s != 200 {
			t.Errorf("a held or queued request: %d", s)
		}
	}
}

func (ts *testServer) metricsText(t *testing.T) string {
	t.Helper()
	status, h, b := ts.do(t, "GET", "/metrics", nil)
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %q", status, h.Get("Content-Type"))
	}
	return string(b)
}

func grep(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A client that disconnects mid-stream cancels its generation within a step
// and frees the slot; the slot's next request is answered as usual.
func TestDisconnectCancels(t *testing.T) {
	ts := start(t, Config{Engine: drafted, Parallel: 1})
	var first sync.Once
	ts.testText = func(ctx context.Context) {
		// Hold the generation after its first text until the client is
		// gone: what it generates after that is what cancellation let run.
		first.Do(func() { <-ctx.Done() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"prompt": "Once upon a time", "temperature": 0, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.url+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil { // the first event is on its way
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the slot freed", func() bool { busy, _ := ts.health(t); return busy == 0 })
	m := ts.metricsText(t)
	if !strings.Contains(m, `redrafter_generations_total{reason="canceled"} 1`) {
		t.Errorf("no cancelled generation in the metrics:\n%s", grep(m, "generations"))
	}
	// The first text came from the first verification pass (at most L=5
	// tokens); one more pass may have run before the step saw the cancel.
	var generated float64
	fmt.Sscanf(grep(m, "redrafter_generated_tokens_total"), "redrafter_generated_tokens_total %g", &generated)
	if generated < 1 || generated > 10 {
		t.Errorf("%v tokens generated after the client left at the first: want at most two steps' (10)", generated)
	}
	ts.testText = nil
	ts.stillServes(t)
}

// A panic in a request is answered 500 and logged; the slot gets a fresh
// session and the server goes on serving.
func TestPanicRecovered(t *testing.T) {
	var logs bytes.Buffer
	ts := start(t, Config{Parallel: 1, Logger: slogTo(&logs)})
	var once sync.Once
	ts.testText = func(ctx context.Context) { once.Do(func() { panic("planted") }) }
	status, h, b := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 5})
	if status != 500 || h.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"server_error"`) {
		t.Errorf("a panicking request: %d %s, want 500 with an error body", status, b)
	}
	if !strings.Contains(logs.String(), "planted") {
		t.Errorf("the panic was not logged:\n%s", logs.String())
	}
	ts.stillServes(t)
}

// Prefix reuse: each conversation's next turn goes back to the slot that
// holds it and runs only what is new; the text is what a fresh session
// gives for the same prompt.
func TestPrefixReuse(t *testing.T) {
	ts := start(t, Config{Parallel: 2})
	type conv struct {
		msgs []map[string]any
		slot int
	}
	convs := []*conv{
		{msgs: []map[string]any{{"role": "system", "content": "Stories about a cat named Tom."}, {"role": "user", "content": "Tell me one."}}},
		{msgs: []map[string]any{{"role": "system", "content": "Stories about a dog who likes to run in the park."}, {"role": "user", "content": "Go on."}}},
	}
	for turn := range 3 {
		for i, c := range convs {
			status, _, b := ts.post(t, "/v1/chat/completions", map[string]any{"messages": c.msgs, "max_tokens": 12, "temperature": 0})
			r := decode[chatResult](t, b)
			if status != 200 || len(r.Choices) != 1 {
				t.Fatalf("conversation %d turn %d: %d %s", i, turn, status, b)
			}
			var msgs []tokenizer.Message
			for _, m := range c.msgs {
				msgs = append(msgs, tokenizer.Message{Role: m["role"].(string), Content: strings.TrimSpace(m["content"].(string))})
			}
			prompt, _ := tokenizer.RenderChat(tokenizer.TemplateVicuna, msgs, true)
			n := len(plain.Tokenizer().EncodeSpecial(prompt, true))
			if want := greedy(t, plain, prompt, 12, true).Text; r.Choices[0].Message.Content != want {
				t.Errorf("conversation %d turn %d: %q, a fresh session %q", i, turn, r.Choices[0].Message.Content, want)
			}
			cached := r.Usage.PromptTokensDetails.CachedTokens
			if turn == 0 {
				c.slot = r.Redrafter.Slot
			} else if r.Redrafter.Slot != c.slot || cached < n/2 || cached >= n {
				t.Errorf("conversation %d turn %d: slot %d (was %d), %d of %d prompt tokens cached", i, turn, r.Redrafter.Slot, c.slot, cached, n)
			}
			c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": r.Choices[0].Message.Content},
				map[string]any{"role": "user", "content": fmt.Sprintf("And then %d?", turn)})
		}
	}
	if convs[0].slot == convs[1].slot {
		t.Error("both conversations in one slot")
	}
}

// Eight concurrent clients over four slots each get their greedy text.
func TestConcurrentClients(t *testing.T) {
	ts := start(t, Config{Engine: drafted, Parallel: 4, Queue: 8})
	starts := []string{"Once upon a time", "Lily and Tom", "The cat", "One day, a little girl", "Tim had a big red ball", "The sun", "Mom said", "A bird"}
	var wg sync.WaitGroup
	for _, p := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Off the test's goroutine: errors are reported and the
			// client returns, never t.Fatal.
			_, _, b, err := ts.tryPost("/v1/completions", map[string]any{"prompt": p, "max_tokens": 30, "temperature": 0})
			if err != nil {
				t.Errorf("%q: %v", p, err)
				return
			}
			var r chatResult
			if err := json.Unmarshal(b, &r); err != nil {
				t.Errorf("%q: %v in %s", p, err, b)
				return
			}
			alone, err := drafted.Generate(context.Background(), p, redrafter.GenerateOptions{MaxTokens: 30}, nil)
			if err != nil {
				t.Errorf("%q alone: %v", p, err)
				return
			}
			if len(r.Choices) != 1 || r.Choices[0].Text != alone.Text {
				t.Errorf("%q: %s, alone %q", p, b, alone.Text)
			}
		}()
	}
	wg.Wait()
}

// smallBuffers makes the server's sockets hold little unsent data, so a
// client that never reads blocks the server's writes after a few KB.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(2048)
	}
	return c, err
}

// A client that never reads its stream is cut off by the write timeout:
// its generation ends, its slot is freed, and others are served meanwhile.
func TestSlowClientCutOff(t *testing.T) {
	s, err := New(Config{Engine: plain, ModelName: "stories260K", Template: tokenizer.TemplateVicuna, Parallel: 1,
		WriteTimeout: 300 * time.Millisecond, Logger: slogTo(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, smallBuffers{ln})
	ts := &testServer{Server: s, url: "http://" + ln.Addr().String()}

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(1024)
	// Room for a long story, in events of ~250 bytes: far more than the
	// socket buffers hold.
	body := `{"prompt":"Once upon a time","temperature":0,"stream":true,"stop":["zzzz"]}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	waitFor(t, "the slot freed from the client that never reads", func() bool {
		m := ts.metricsText(t)
		return strings.Contains(m, `redrafter_generations_total{reason="error"} 1`) || strings.Contains(m, `redrafter_generations_total{reason="canceled"} 1`)
	})
	if busy, _ := ts.health(t); busy != 0 {
		t.Errorf("%d slots busy after the slow client was cut off", busy)
	}
	ts.stillServes(t)
}

// Thousands of idle connections neither stop the server from serving nor
// outlive the header timeout; their goroutines go away with them.
func TestIdleConnections(t *testing.T) {
	base := runtime.NumGoroutine()
	ts := start(t, Config{ReadHeaderTimeout: 500 * time.Millisecond})
	const n = 2000
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	addr := strings.TrimPrefix(ts.url, "http://")
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	ts.stillServes(t)
	// The server closes each idle connection at the header timeout.
	for _, c := range conns[:10] {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("an idle connection: %v, want EOF (closed by the server)", err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	ts.stop()
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, fmt.Sprintf("back to %d goroutines", base), func() bool { return runtime.NumGoroutine() <= base })
}

// Shutdown lets requests in flight finish within the grace period, then
// cancels the rest: a stream still running gets an error event and [DONE],
// and Serve returns.
func TestShutdownCancelsStreams(t *testing.T) {
	ts := start(t, Config{ShutdownTimeout: 200 * time.Millisecond})
	ts.testText = func(ctx context.Context) { <-ctx.Done() } // never finishes by itself
	b, _ := json.Marshal(map[string]any{"prompt": "Once", "stream": true})
	resp, err := http.Post(ts.url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitFor(t, "decoding", func() bool { busy, _ := ts.health(t); return busy == 1 })
	stopped := make(chan struct{})
	go func() { ts.stop(); close(stopped) }()
	events, done := sse(t, resp.Body)
	last := events[len(events)-1]
	if !done || last.Error == nil || last.Error.Code == nil || *last.Error.Code != "shutting_down" {
		t.Errorf("a stream cut by shutdown ended with %+v (done %v)", last, done)
	}
	<-stopped
	if _, err := http.Get(ts.url + "/health"); err == nil {
		t.Error("the server still accepts after shutdown")
	}
}

// withHost sends a request with Host: host to the server (which listens on
// 127.0.0.1) and returns the status and the error code.
func (ts *testServer) withHost(t *testing.T, method, path, host, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e chatResult
	json.Unmarshal(b, &e)
	code := ""
	if e.Error != nil && e.Error.Code != nil {
		code = *e.Error.Code
	}
	return resp.StatusCode, code
}

// A web page cannot reach the server under its own name (DNS rebinding: its
// name resolves to 127.0.0.1, so the browser sends it as Host) nor under any
// other name: 403 on every route, before any work. IP addresses, localhost
// and the names given in AllowedHosts are answered.
func TestHostCheck(t *testing.T) {
	ts := start(t, Config{})
	port := ts.url[strings.LastIndex(ts.url, ":")+1:]
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for _, host := range []string{"attacker.example", "evil.example:" + port, "localhost.evil.example:" + port, "127.0.0.1.nip.io:" + port} {
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/v1/chat/completions", chat},
			{"POST", "/v1/completions", `{"prompt":"Once","max_tokens":2}`},
			{"POST", "/tokenize", `{"content":"Once"}`},
			{"GET", "/metrics", ""},
			{"GET", "/v1/models", ""},
		} {
			if status, code := ts.withHost(t, r.method, r.path, host, r.body); status != 403 || code != "host_not_allowed" {
				t.Errorf("Host %s: %s %s answered %d %q, want 403 host_not_allowed", host, r.method, r.path, status, code)
			}
		}
	}
	if m := ts.metricsText(t); strings.Contains(m, "redrafter_generations_total{") {
		t.Errorf("a refused Host generated:\n%s", grep(m, "generations"))
	}
	for _, host := range []string{"localhost", "localhost:" + port, "LocalHost.:" + port, "app.localhost:" + port,
		"127.0.0.1", "127.0.0.1:" + port, "[::1]:" + port, "[::1]", "10.1.2.3:" + port} {
		if status, code := ts.withHost(t, "POST", "/v1/chat/completions", host, chat); status != 200 {
			t.Errorf("Host %s: %d %q, want 200", host, status, code)
		}
	}

	proxied := start(t, Config{AllowedHosts: []string{"llm.example.com", "Gateway.Internal."}})
	for host, want := range map[string]int{"llm.example.com": 200, "llm.example.com:443": 200, "LLM.example.com": 200,
		"gateway.internal:8080": 200, "example.com": 403, "api.llm.example.com": 403, "localhost:" + port: 200} {
		if status, _ := proxied.withHost(t, "GET", "/v1/models", host, ""); status != want {
			t.Errorf("AllowedHosts llm.example.com: Host %s answered %d, want %d", host, status, want)
		}
	}
	anyHost := start(t, Config{AllowedHosts: []string{"*"}})
	if status, _ := anyHost.withHost(t, "GET", "/v1/models", "evil.example", ""); status != 200 {
		t.Errorf("AllowedHosts *: Host evil.example answered %d, want 200", status)
	}
	for _, bad := range []string{"llm.example.com:443", "http://llm.example.com", "a b", ""} {
		if _, err := New(Config{Engine: plain, ModelName: "m", Template: tokenizer.TemplateVicuna, AllowedHosts: []string{bad}}); err == nil {
			t.Errorf("AllowedHosts %q accepted", bad)
		}
	}
}

// Every POST route takes application/json only (with a UTF-8 charset or
// none): a page's "simple" requests (text/plain, forms), which a browser
// sends cross-origin without a preflight, are refused with 415.
func TestPOSTNeedsJSON(t *testing.T) {
	ts := start(t, Config{})
	bodies := map[string]string{
		"/v1/chat/completions": `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`,
		"/v1/completions":      `{"prompt":"Once","max_tokens":2}`,
		"/tokenize":            `{"content":"Once"}`,
		"/detokenize":          `{"tokens":[1]}`,
	}
	for path, body := range bodies {
		for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
			"", "application/jsonx", "application/json; charset=latin1", "json"} {
			req, _ := http.NewRequest("POST", ts.url+path, strings.NewReader(body))
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 415 || !strings.Contains(string(b), `"unsupported_media_type"`) || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("POST %s with Content-Type %q: %d %s, want 415", path, ct, resp.StatusCode, b)
			}
		}
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
			if status, _, b := ts.post(t, path, body, "Content-Type", ct); status != 200 {
				t.Errorf("POST %s with Content-Type %q: %d %s, want 200", path, ct, status, b)
			}
		}
	}
	m := ts.metricsText(t)
	generations := 0
	for _, l := range strings.Split(grep(m, "redrafter_generations_total{"), "\n") {
		var n int
		fmt.Sscanf(l[strings.LastIndex(l, " ")+1:], "%d", &n)
		generations += n
	}
	if generations != 6 {
		t.Errorf("%d generations, want the 6 sent as JSON only:\n%s", generations, grep(m, "generations"))
	}
}

// Fields the server does not implement are refused naming the field, unless
// they ask for nothing; max_tokens 0 is refused as OpenAI does; null stop is
// no stop; the order of stop strings does not matter.
func TestUnsupportedFields(t *testing.T) {
	ts := start(t, Config{})
	for _, c := range []struct{ field, body string }{
		{"max_tokens", `"max_tokens":0`},
		{"max_completion_tokens", `"max_completion_tokens":0`},
		{"max_completion_tokens", `"max_tokens":5,"max_completion_tokens":0`},
		{"response_format", `"response_format":{"type":"json_object"}`},
		{"response_format", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}`},
		{"logit_bias", `"logit_bias":{"50":-100}`},
		{"presence_penalty", `"presence_penalty":0.5`},
		{"frequency_penalty", `"frequency_penalty":-1`},
		{"tool_choice", `"tool_choice":"required"`},
		{"modalities", `"modalities":["text","audio"]`},
		{"audio", `"audio":{"voice":"alloy","format":"wav"}`},
		{"prediction", `"prediction":{"type":"content","content":"x"}`},
		{"reasoning_effort", `"reasoning_effort":"high"`},
		{"min_p", `"min_p":0.1`},
		{"grammar", `"grammar":"root ::= \"a\""`},
		{"messages[0].name", `"messages":[{"role":"user","content":"hi","name":"bob"}]`},
		{"messages[0].tool_calls", `"messages":[{"role":"assistant","content":"hi","tool_calls":[{"id":"1"}]}]`},
		{"stream_options.bogus", `"stream":true,"stream_options":{"bogus":1}`},
	} {
		body := `{"messages":[{"role":"user","content":"hi"}],` + c.body + `}`
		if strings.Contains(c.body, `"messages"`) {
			body = `{` + c.body + `}`
		}
		status, _, b := ts.post(t, "/v1/chat/completions", body)
		var e struct {
			Error struct{ Message, Param string }
		}
		json.Unmarshal(b, &e)
		param := c.field
		if i := strings.LastIndex(param, "."); i >= 0 && !strings.HasPrefix(param, "messages") {
			param = param[i+1:]
		}
		if status != 400 || e.Error.Param != param || !strings.Contains(e.Error.Message, param) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, status, b, param)
		}
	}
	// What asks for nothing is accepted, as clients send it.
	for _, extra := range []string{`"stop":null`, `"presence_penalty":0,"frequency_penalty":0`, `"logit_bias":{}`, `"logit_bias":null`,
		`"response_format":{"type":"text"}`, `"user":"u1","metadata":{"a":"b"},"store":false,"service_tier":"auto"`, `"n":1,"logprobs":false`,
		`"tool_choice":"none","parallel_tool_calls":false`, `"modalities":["text"]`, `"max_tokens":null`,
		`"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}`} {
		body := `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hi!","refusal":null,"tool_calls":null,"annotations":[]},` +
			`{"role":"user","content":"more"}],"max_completion_tokens":2,` + extra + `}`
		if status, _, b := ts.post(t, "/v1/chat/completions", body); status != 200 {
			t.Errorf("%s: %d %s, want 200", extra, status, b)
		}
	}
	// Stop strings end the text before the earliest match, in any order.
	for _, stop := range []string{`["e"," there"]`, `[" there","e"]`} {
		_, _, b := ts.post(t, "/v1/completions", `{"prompt":"Once upon a time,","max_tokens":10,"temperature":0,"stop":`+stop+`}`)
		if r := decode[chatResult](t, b); len(r.Choices) != 1 || r.Choices[0].Text != "" || *r.Choices[0].FinishReason != "stop" {
			t.Errorf("stop %s: %s, want \"\" (\" there\" starts the continuation)", stop, b)
		}
	}
}

// A prompt far over the context is refused by its bytes, before it is
// tokenized: the request allocates little more than its body.
func TestHugePromptRefusedUntokenized(t *testing.T) {
	ts := start(t, Config{})
	prompt := strings.Repeat("Once upon a time there was a cat. ", (DefaultMaxBodyBytes-1024)/34)
	body := `{"prompt":"` + prompt + `","max_tokens":1}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	status, _, b := ts.post(t, "/v1/completions", body)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d-byte prompt: %d in %v, %d MiB allocated (client and server)", len(prompt), status, took, allocated>>20)
	if status != 400 || !strings.Contains(string(b), "context_length_exceeded") {
		t.Errorf("a %d-byte prompt: %d %s, want 400 context_length_exceeded", len(prompt), status, b)
	}
	if allocated > 64<<20 {
		t.Errorf("refusing a %d-byte prompt allocated %d MiB: it was tokenized", len(prompt), allocated>>20)
	}
}

// Tokenizing is counted under --parallel and --queue: with the one slot
// busy and no queue, a long prompt and /tokenize are refused with 429 before
// they are tokenized; once the slot is free they are answered.
func TestTokenizingIsAdmitted(t *testing.T) {
	ts := start(t, Config{Parallel: 1, Queue: 0})
	release := make(chan struct{})
	var holds sync.Once
	ts.testAcquired = func(ctx context.Context) { holds.Do(func() { <-release }) }
	held := make(chan int, 1)
	go func() {
		status, _, _, err := ts.tryPost("/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 2})
		if err != nil {
			t.Error(err)
		}
		held <- status
	}()
	waitFor(t, "the slot busy", func() bool { busy, _ := ts.health(t); return busy == 1 })
	long := strings.Repeat("Once upon a time there was a cat. ", 60) // over the context in tokens, not in bytes
	if status, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": long}); status != 429 {
		t.Errorf("a long prompt while the slot is busy: %d %s, want 429 before tokenizing", status, b)
	}
	if status, _, b := ts.post(t, "/tokenize", map[string]any{"content": long}); status != 429 {
		t.Errorf("/tokenize while the slot is busy: %d %s, want 429", status, b)
	}
	close(release)
	if s := <-held; s != 200 {
		t.Errorf("the request holding the slot: %d", s)
	}
	if status, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": long}); status != 400 {
		t.Errorf("a long prompt on a free server: %d %s, want 400", status, b)
	}
	if status, _, b := ts.post(t, "/tokenize", map[string]any{"content": long}); status != 200 {
		t.Errorf("/tokenize on a free server: %d %s", status, b)
	}
}

// A request refused after tokenizing (its prompt over the context) gives
// its memory back to the OS as a generation does, once the server is idle.
func TestRefusedPromptReleasesMemory(t *testing.T) {
	saved := restTime
	t.Cleanup(func() { restTime = saved }) // after the server stops
	restTime = 20 * time.Millisecond
	ts := start(t, Config{})
	long := strings.Repeat("Once upon a time there was a cat. ", 60)
	if status, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": long}); status != 400 {
		t.Fatalf("%d %s, want 400", status, b)
	}
	waitFor(t, "memory returned after the refused prompt", func() bool { return ts.rests.Load() > 0 })
}

// A body that trickles in past the read timeout is answered 408, not 400.
func TestSlowBodyTimesOut(t *testing.T) {
	ts := start(t, Config{ReadTimeout: 500 * time.Millisecond})
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"prompt":"Once upon a time","max_tokens":2}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	go func() {
		for i := range len(body) {
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || !strings.Contains(string(b), `"request_timeout"`) {
		t.Errorf("a body at 10 bytes a second: %d %s, want 408 request_timeout", resp.StatusCode, b)
	}
}

// A beam that cannot fit the context would fail every request: New refuses it.
func TestBeamOverContextRefused(t *testing.T) {
	_, err := New(Config{Engine: drafted, ModelName: "m", Template: tokenizer.TemplateVicuna, Draft: redrafter.DraftOptions{BeamWidth: 50, BeamLength: 50}})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("context of %d", testContext)) {
		t.Errorf("beams of 50×50 in a context of %d: %v, want an error naming the context", testContext, err)
	}
	// Without a draft head the beam is not used.
	s, err := New(Config{Engine: plain, ModelName: "m", Template: tokenizer.TemplateVicuna, Draft: redrafter.DraftOptions{BeamWidth: 50, BeamLength: 50}})
	if err != nil {
		t.Errorf("beams without a draft head: %v", err)
	} else {
		s.Close()
	}
}
