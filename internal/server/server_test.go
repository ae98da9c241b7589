package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// The bundled demo model and its draft head, with a small context so that
// a generation "until the context is full" stays short.
const (
	stories     = "../../models/stories260K/stories260K.gguf"
	storiesHead = "../../models/stories260K/drafter"
	testContext = 256
)

// plain decodes autoregressively; drafted has the bundled draft head.
var plain, drafted *redrafter.Engine

func TestMain(m *testing.M) {
	var err error
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if plain, err = redrafter.Load(stories, redrafter.Options{Backend: "cpu", Context: testContext, Logger: quiet}); err == nil {
		if drafted, err = redrafter.Load(stories, redrafter.Options{Backend: "cpu", Context: testContext, Logger: quiet}); err == nil {
			err = drafted.LoadDrafter(storiesHead)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	plain.Close()
	drafted.Close()
	os.Exit(code)
}

// testServer is a Server serving on a loopback port through Serve, as
// `redrafter serve` runs it.
type testServer struct {
	*Server
	url  string
	stop func() // shuts the server down (Serve returns), then closes it
}

func start(t testing.TB, cfg Config) *testServer {
	t.Helper()
	if cfg.Engine == nil {
		cfg.Engine = plain
	}
	if cfg.ModelName == "" {
		cfg.ModelName = "stories260K"
	}
	if cfg.Template == "" {
		cfg.Template = tokenizer.TemplateVicuna
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(cfg)
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
	var once sync.Once
	ts := &testServer{Server: s, url: "http://" + ln.Addr().String()}
	ts.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
			s.Close()
		})
	}
	t.Cleanup(ts.stop)
	return ts
}

// post sends body (a string as is, else JSON) and returns the status, the
// response and its body.
func (ts *testServer) post(t *testing.T, path string, body any, header ...string) (int, http.Header, []byte) {
	t.Helper()
	status, h, b, err := ts.tryPost(path, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return status, h, b
}

// tryPost is post that returns its error rather than failing the test, for
// goroutines other than the test's, where t.Fatal must not be called.
func (ts *testServer) tryPost(path string, body any, header ...string) (int, http.Header, []byte, error) {
	var r io.Reader
	if s, ok := body.(string); ok {
		r = strings.NewReader(s)
	} else {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		r = bytes.NewReader(b)
	}
	return ts.tryDo("POST", path, r, header...)
}

func (ts *testServer) do(t *testing.T, method, path string, body io.Reader, header ...string) (int, http.Header, []byte) {
	t.Helper()
	status, h, b, err := ts.tryDo(method, path, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return status, h, b
}

// tryDo is do that returns its error rather than failing the test.
func (ts *testServer) tryDo(method, path string, body io.Reader, header ...string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(method, ts.url+path, body)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return v
}

// chatPrompt is what the server renders for one user message with the
// vicuna template.
func chatPrompt(user string) string {
	p, err := tokenizer.RenderChat(tokenizer.TemplateVicuna, []tokenizer.Message{{Role: "user", Content: user}}, true)
	if err != nil {
		panic(err)
	}
	return p
}

// greedy is the engine's own greedy text for prompt, the reference every
// server answer is held to.
func greedy(t *testing.T, e *redrafter.Engine, prompt string, maxTokens int, chat bool) *redrafter.Result {
	t.Helper()
	res, err := e.Generate(context.Background(), prompt, redrafter.GenerateOptions{MaxTokens: maxTokens, ParseSpecial: chat}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func chatBody(user string, maxTokens int, extra ...any) map[string]any {
	b := map[string]any{
		"model":       "stories260K",
		"messages":    []map[string]any{{"role": "user", "content": user}},
		"max_tokens":  maxTokens,
		"temperature": 0,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

type chatResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage     *usage     `json:"usage"`
	Redrafter *extension `json:"redrafter"`
	Error     *struct {
		Message, Type string
		Code          *string
	} `json:"error"`
}

// sse reads a server-sent event stream: the data of each event, up to and
// without [DONE]; done says [DONE] came.
func sse(t *testing.T, r io.Reader) (events []chatResult, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			return events, true
		}
		events = append(events, decode[chatResult](t, []byte(data)))
	}
	return events, false
}

// Greedy chat and completions through the server give the engine's own
// text, with and without ReDrafter, with usage, finish_reason and the
// redrafter extension (tokens per step only when speculation ran).
func TestGreedyEqualsEngine(t *testing.T) {
	for _, e := range []*redrafter.Engine{plain, drafted} {
		_, withHead := e.DraftHead()
		ts := start(t, Config{Engine: e})
		prompt := chatPrompt("Tell me a story about a cat.")
		want := greedy(t, e, prompt, 40, true)
		status, h, b := ts.post(t, "/v1/chat/completions", chatBody("Tell me a story about a cat.", 40))
		if status != 200 || h.Get("Content-Type") != "application/json" {
			t.Fatalf("chat: %d %q %s", status, h.Get("Content-Type"), b)
		}
		r := decode[chatResult](t, b)
		ids := e.Tokenizer().EncodeSpecial(prompt, true)
		switch {
		case r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") || r.Model != "stories260K":
			t.Errorf("chat: object %q id %q model %q", r.Object, r.ID, r.Model)
		case len(r.Choices) != 1 || r.Choices[0].Message.Role != "assistant" || r.Choices[0].Message.Content != want.Text:
			t.Errorf("drafter %v: chat answered %+v, the engine %q", withHead, r.Choices, want.Text)
		case *r.Choices[0].FinishReason != "length":
			t.Errorf("finish_reason %q after max_tokens, want length", *r.Choices[0].FinishReason)
		case r.Usage == nil || r.Usage.PromptTokens != len(ids) || r.Usage.CompletionTokens != 40 || r.Usage.TotalTokens != len(ids)+40:
			t.Errorf("usage %+v, want %d prompt and 40 completion tokens", r.Usage, len(ids))
		case r.Redrafter == nil || withHead != (r.Redrafter.Steps > 0 && r.Redrafter.TokensPerStep >= 1):
			t.Errorf("drafter %v: extension %+v", withHead, r.Redrafter)
		}

		wantC := greedy(t, e, "Once upon a time", 30, false)
		status, _, b = ts.post(t, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0})
		c := decode[chatResult](t, b)
		if status != 200 || c.Object != "text_completion" || len(c.Choices) != 1 || c.Choices[0].Text != wantC.Text {
			t.Errorf("drafter %v: completion %d %s, want %q", withHead, status, b, wantC.Text)
		}
	}
}

// A stream is the same text in deltas: the role first, then content, a
// last chunk with finish_reason, the usage chunk when asked, then [DONE].
func TestStreamEqualsPlain(t *testing.T) {
	ts := start(t, Config{Engine: drafted})
	want := greedy(t, drafted, chatPrompt("Hello"), 50, true).Text
	body := chatBody("Hello", 50, "stream", true, "stream_options", map[string]any{"include_usage": true})
	b, _ := json.Marshal(body)
	resp, err := http.Post(ts.url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: %d %q", resp.StatusCode, ct)
	}
	events, done := sse(t, resp.Body)
	if !done || len(events) < 4 {
		t.Fatalf("%d events, [DONE] %v", len(events), done)
	}
	if events[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk %+v: want the assistant role", events[0].Choices[0])
	}
	var text strings.Builder
	for _, ev := range events[:len(events)-2] {
		if ev.Object != "chat.completion.chunk" || len(ev.Choices) != 1 || ev.Choices[0].FinishReason != nil {
			t.Errorf("content chunk %+v", ev)
			continue
		}
		if c := ev.Choices[0].Delta.Content; c != nil {
			text.WriteString(*c)
		}
	}
	if text.String() != want {
		t.Errorf("streamed %q, want %q", text.String(), want)
	}
	last, u := events[len(events)-2], events[len(events)-1]
	if len(last.Choices) != 1 || last.Choices[0].FinishReason == nil || *last.Choices[0].FinishReason != "length" || last.Redrafter == nil || last.Redrafter.Steps == 0 {
		t.Errorf("last chunk %+v", last)
	}
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 50 {
		t.Errorf("usage chunk %+v", u)
	}

	// Without include_usage there is no usage chunk.
	body = map[string]any{"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "stream": true}
	b, _ = json.Marshal(body)
	resp2, err := http.Post(ts.url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	events, done = sse(t, resp2.Body)
	text.Reset()
	for _, ev := range events {
		if ev.Usage != nil {
			t.Errorf("a usage chunk without include_usage: %+v", ev)
		}
		if len(ev.Choices) == 1 {
			text.WriteString(ev.Choices[0].Text)
		}
	}
	if want := greedy(t, drafted, "Once upon a time", 10, false).Text; !done || text.String() != want {
		t.Errorf("completion stream %q (done %v), want %q", text.String(), done, want)
	}
}

// Stop strings end the text before them with finish_reason stop.
func TestStopString(t *testing.T) {
	ts := start(t, Config{})
	full := greedy(t, plain, "Once upon a time", 40, false).Text
	i := strings.Index(full, " a")
	if i <= 0 {
		t.Fatalf("the greedy text %q has no \" a\" to stop at", full)
	}
	_, _, b := ts.post(t, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": " a"})
	r := decode[chatResult](t, b)
	if len(r.Choices) != 1 || r.Choices[0].Text != full[:i] || *r.Choices[0].FinishReason != "stop" {
		t.Errorf("stop \" a\": %s, want text %q and finish_reason stop", b, full[:i])
	}
}

func TestModelsAndTokenize(t *testing.T) {
	ts := start(t, Config{})
	status, h, b := ts.do(t, "GET", "/v1/models", nil)
	list := decode[struct {
		Object string
		Data   []modelEntry
	}](t, b)
	if status != 200 || h.Get("Content-Type") != "application/json" || list.Object != "list" || len(list.Data) != 1 ||
		list.Data[0].ID != "stories260K" || list.Data[0].Object != "model" || list.Data[0].Context != testContext {
		t.Errorf("models: %d %s", status, b)
	}
	if status, _, b := ts.do(t, "GET", "/v1/models/stories260K", nil); status != 200 || decode[modelEntry](t, b).ID != "stories260K" {
		t.Errorf("model: %d %s", status, b)
	}
	if status, _, _ := ts.do(t, "GET", "/v1/models/gpt-4", nil); status != 404 {
		t.Errorf("an unknown model: %d, want 404", status)
	}
	_, _, b = ts.post(t, "/tokenize", map[string]any{"content": "Once upon a time", "add_special": true})
	tokens := decode[struct{ Tokens []int32 }](t, b).Tokens
	if want := plain.Tokenizer().Encode("Once upon a time", true); fmt.Sprint(tokens) != fmt.Sprint(want) {
		t.Errorf("tokenize: %v, want %v", tokens, want)
	}
	_, _, b = ts.post(t, "/detokenize", map[string]any{"tokens": tokens})
	if got := decode[struct{ Content string }](t, b).Content; got != "Once upon a time" {
		t.Errorf("detokenize: %q", got)
	}
	if status, _, _ := ts.post(t, "/detokenize", map[string]any{"tokens": []int{1, 1 << 20}}); status != 400 {
		t.Errorf("detokenize of an id outside the vocabulary: %d, want 400", status)
	}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

var _ = time.Second
