// Package openaigo tests `redrafter serve` with the official OpenAI Go client.
// It is a module of its own so that the main module does not depend on the
// client: `make test` runs it (cd tests/openai-go && go test ./...). It builds
// the redrafter binary from the parent module, starts it on a loopback port
// with the bundled demo model, and holds every greedy answer to what
// `redrafter generate` prints for the same prompt.
package openaigo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
)

const (
	model   = "../../models/stories260K/stories260K.gguf"
	drafter = "../../models/stories260K/drafter"
	key     = "test-key-123"
	// vicunaSystem is the system prompt the server's vicuna template (the
	// demo model has no template of its own) puts before the first turn.
	vicunaSystem = "A chat between a curious user and an artificial intelligence assistant. " +
		"The assistant gives helpful, detailed, and polite answers to the user's questions."
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redrafter-openai-go-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "redrafter")
	build := exec.Command("go", "build", "-o", bin, "./cmd/redrafter")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building redrafter:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a running `redrafter serve`.
type server struct {
	url    string
	client openai.Client
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// serve starts the binary on a free loopback port (the API key from the
// environment, as a user would keep it out of the process list) and stops
// it with SIGTERM when the test ends, checking that it exits 0.
func serve(t *testing.T, withDrafter bool, args ...string) *server {
	t.Helper()
	args = append([]string{"serve", "--backend", "cpu", "-m", model, "--port", "0"}, args...)
	if withDrafter {
		args = append(args, "--drafter", drafter)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "REDRAFTER_API_KEY="+key)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	var logs strings.Builder
	var logsMu sync.Mutex
	// readDone closes when the log is read to its end, which Wait must
	// follow: it closes the pipe, losing what was not read yet.
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logsMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logsMu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
	}()
	var a string
	select {
	case a = <-addr:
	case <-time.After(60 * time.Second):
	}
	if a == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("redrafter serve did not start:\n%s", logs.String())
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-readDone:
		case <-time.After(30 * time.Second):
		}
		err := cmd.Wait()
		logsMu.Lock()
		defer logsMu.Unlock()
		if err != nil || !strings.Contains(logs.String(), "msg=stopped") {
			t.Errorf("redrafter serve after SIGTERM: %v\n%s", err, logs.String())
		}
	})
	url := "http://" + a
	return &server{url: url, client: openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))}
}

var (
	generated   = map[string]string{}
	generatedMu sync.Mutex
)

// generate is `redrafter generate`'s greedy text for prompt.
func generate(t *testing.T, prompt string, maxTokens int, withDrafter bool) string {
	t.Helper()
	k := fmt.Sprint(prompt, maxTokens, withDrafter)
	generatedMu.Lock()
	defer generatedMu.Unlock()
	if s, ok := generated[k]; ok {
		return s
	}
	args := []string{"generate", "--backend", "cpu", "-m", model, "-p", prompt, "-n", fmt.Sprint(maxTokens)}
	if withDrafter {
		args = append(args, "--drafter", drafter)
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("redrafter generate: %v", err)
	}
	s := strings.TrimSuffix(string(out), "\n") // generate ends the text with a newline
	generated[k] = s
	return s
}

func chatParams(user string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:       "stories260K",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user)},
		MaxTokens:   openai.Int(maxTokens),
		Temperature: openai.Float(0),
	}
}

func completionParams(prompt string, maxTokens int64) openai.CompletionNewParams {
	return openai.CompletionNewParams{
		Model:       "stories260K",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens:   openai.Int(maxTokens),
		Temperature: openai.Float(0),
	}
}

// Chat and completions, plain and streamed, give `redrafter generate`'s
// greedy text, with and without the draft head; the model list names the
// model.
func TestClient(t *testing.T) {
	for _, withDrafter := range []bool{false, true} {
		t.Run(fmt.Sprintf("drafter=%v", withDrafter), func(t *testing.T) {
			s := serve(t, withDrafter)
			ctx := context.Background()
			user := "Tell me a story about a dog."
			want := generate(t, vicunaSystem+" USER: "+user+" ASSISTANT:", 40, withDrafter)

			chat, err := s.client.Chat.Completions.New(ctx, chatParams(user, 40))
			if err != nil {
				t.Fatal(err)
			}
			if len(chat.Choices) != 1 || chat.Choices[0].Message.Content != want || chat.Choices[0].FinishReason != "length" {
				t.Errorf("chat: %+v, generate %q", chat.Choices, want)
			}
			if chat.Usage.CompletionTokens != 40 || chat.Usage.PromptTokens == 0 {
				t.Errorf("chat usage %+v", chat.Usage)
			}
			var ext struct {
				TokensPerStep float64 `json:"tokens_per_step"`
			}
			if err := json.Unmarshal([]byte(chat.JSON.ExtraFields["redrafter"].Raw()), &ext); err != nil || withDrafter != (ext.TokensPerStep > 0) {
				t.Errorf("the redrafter extension: %v %s", err, chat.JSON.ExtraFields["redrafter"].Raw())
			}

			params := chatParams(user, 40)
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := s.client.Chat.Completions.NewStreaming(ctx, params)
			acc := openai.ChatCompletionAccumulator{}
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			stream.Close()
			if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want || acc.Usage.CompletionTokens != 40 {
				t.Errorf("chat stream: %+v (usage %+v), generate %q", acc.Choices, acc.Usage, want)
			}

			wantC := generate(t, "Once upon a time", 30, withDrafter)
			c, err := s.client.Completions.New(ctx, completionParams("Once upon a time", 30))
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Choices) != 1 || c.Choices[0].Text != wantC {
				t.Errorf("completion: %+v, generate %q", c.Choices, wantC)
			}
			cs := s.client.Completions.NewStreaming(ctx, completionParams("Once upon a time", 30))
			var text strings.Builder
			for cs.Next() {
				if ch := cs.Current().Choices; len(ch) == 1 {
					text.WriteString(ch[0].Text)
				}
			}
			if err := cs.Err(); err != nil || text.String() != wantC {
				t.Errorf("completion stream: %q %v, generate %q", text.String(), err, wantC)
			}
			cs.Close()

			models, err := s.client.Models.List(ctx)
			if err != nil || len(models.Data) != 1 || models.Data[0].ID != "stories260K" {
				t.Errorf("models: %+v %v", models, err)
			}
		})
	}
}

func TestWrongKey(t *testing.T) {
	s := serve(t, false)
	bad := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	_, err := bad.Chat.Completions.New(context.Background(), chatParams("Hi", 5))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
		t.Errorf("a wrong key: %v, want a 401 invalid_api_key", err)
	}
	if _, err := bad.Models.List(context.Background()); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("models with a wrong key: %v", err)
	}
}

// busy reads /health's busy slots (no key needed).
func (s *server) busy(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(s.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		SlotsBusy int `json:"slots_busy"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatalf("health: %v %s", err, b)
	}
	return h.SlotsBusy
}

// A stream cancelled by the client frees its slot; the server goes on.
func TestCancelledStream(t *testing.T) {
	s := serve(t, true, "--parallel", "1", "--context", "2048")
	ctx, cancel := context.WithCancel(context.Background())
	p := chatParams("Tell me a long story.", 0)
	p.MaxTokens = param.Opt[int64]{} // until the context is full
	p.Stop = openai.ChatCompletionNewParamsStopUnion{OfString: openai.String("zzzz")}
	stream := s.client.Chat.Completions.NewStreaming(ctx, p)
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	cancel()
	for stream.Next() {
	}
	if err := stream.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled stream ended with %v", err)
	}
	stream.Close()
	deadline := time.Now().Add(20 * time.Second)
	for s.busy(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the slot is still busy 20 s after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The generation was cancelled, not run to the end of the context.
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "\nredrafter_generations_total{reason=\"canceled\"} 1\n") {
		t.Errorf("no cancelled generation in /metrics")
	}
	want := generate(t, "Once upon a time", 20, true)
	c, err := s.client.Completions.New(context.Background(), completionParams("Once upon a time", 20))
	if err != nil || c.Choices[0].Text != want {
		t.Errorf("after the cancel: %v %+v, generate %q", err, c, want)
	}
}

// Eight concurrent clients over four slots each get their greedy text.
func TestConcurrentClients(t *testing.T) {
	prompts := []string{"Once upon a time", "Lily and Tom", "The cat", "One day, a little girl", "Tim had a big red ball", "The sun", "Mom said", "A bird"}
	for _, withDrafter := range []bool{false, true} {
		t.Run(fmt.Sprintf("drafter=%v", withDrafter), func(t *testing.T) {
			s := serve(t, withDrafter, "--parallel", "4")
			// The texts to expect, got here: generate may t.Fatal, which
			// only the test's own goroutine may call.
			wants := make([]string, len(prompts))
			for i, p := range prompts {
				wants[i] = generate(t, p, 32, withDrafter)
			}
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					want := wants[i]
					if i%2 == 0 {
						c, err := s.client.Completions.New(context.Background(), completionParams(p, 32))
						if err != nil || len(c.Choices) != 1 || c.Choices[0].Text != want {
							t.Errorf("%q: %v %+v, generate %q", p, err, c, want)
						}
						return
					}
					cs := s.client.Completions.NewStreaming(context.Background(), completionParams(p, 32))
					var text strings.Builder
					for cs.Next() {
						if ch := cs.Current().Choices; len(ch) == 1 {
							text.WriteString(ch[0].Text)
						}
					}
					if err := cs.Err(); err != nil || text.String() != want {
						t.Errorf("%q streamed: %q %v, generate %q", p, text.String(), err, want)
					}
				}()
			}
			wg.Wait()
		})
	}
}
