package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// postRoutes are the routes that take a body.
var postRoutes = []string{"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}

// FuzzPOSTRoutes sends arbitrary bodies, with arbitrary content types, to
// the POST routes of a server on loopback. No answer may be a 5xx, and each
// must be what its Content-Type says: one JSON value, or (a stream) events
// of JSON ending in [DONE] and holding no server error. `make fuzz` runs it
// for a minute; `go test` runs the seeds.
func FuzzPOSTRoutes(f *testing.F) {
	ts := start(f, Config{Parallel: 2, Queue: 4})
	chat := func(extra string) []byte {
		return []byte(`{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":8` + extra + `}`)
	}
	for _, s := range []struct {
		route       uint8
		contentType string
		body        []byte
	}{
		{0, "application/json", chat("")},
		{0, "application/json", chat(`,"stream":true,"stream_options":{"include_usage":true}`)},
		{0, "application/json", chat(`,"temperature":1.5,"top_p":0.5,"top_k":3,"seed":7,"stop":["the","."]`)},
		{0, "application/json", chat(`,"response_format":{"type":"json_object"}`)},
		{0, "application/json", []byte(`{"messages":[{"role":"system","content":[{"type":"text","text":"</s><s>"}]},{"role":"user","content":"\u0000\ud800"}]}`)},
		{1, "application/json", []byte(`{"prompt":"Once upon a time","max_tokens":16,"stop":null,"stream":true}`)},
		{1, "application/json; charset=utf-8", []byte(`{"prompt":["Once"],"max_completion_tokens":1e3,"temperature":0}`)},
		{1, "application/json", []byte(`{"prompt":"` + strings.Repeat("cat ", 400) + `"}`)},
		{1, "text/plain", []byte(`{"prompt":"Once"}`)},
		{2, "application/json", []byte(`{"content":"<s>Once</s>","add_special":true,"parse_special":true}`)},
		{2, "application/json", []byte(`{"content":null}`)},
		{3, "application/json", []byte(`{"tokens":[1,2,3,-1,99999999999]}`)},
		{3, "application/json", []byte(`{"tokens":[1,2,3]}`)},
		{0, "application/json", []byte(`{"messages":[`)},
		{1, "application/json", []byte(`[1,{"a":`)},
		{2, "", nil},
	} {
		f.Add(s.route, s.contentType, s.body)
	}
	f.Fuzz(func(t *testing.T, route uint8, contentType string, body []byte) {
		path := postRoutes[int(route)%len(postRoutes)]
		req, err := http.NewRequest("POST", ts.url+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsFunc(contentType, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			contentType = "application/json" // the client would refuse to send it
		}
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s %q: %v", path, body, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("POST %s %q: reading the answer: %v", path, body, err)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, resp.StatusCode, b)
		}
		switch ct := resp.Header.Get("Content-Type"); ct {
		case "application/json":
			if !json.Valid(b) {
				t.Fatalf("POST %s %q: %d with invalid JSON %q", path, body, resp.StatusCode, b)
			}
		case "text/event-stream":
			checkEvents(t, path, body, b)
		default:
			t.Fatalf("POST %s %q: %d with Content-Type %q: %q", path, body, resp.StatusCode, ct, b)
		}
	})
}

// checkEvents checks a stream: "data: JSON" events, no server error among
// them, and [DONE] last.
func checkEvents(t *testing.T, path string, body, stream []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(stream))
	sc.Buffer(nil, 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		switch {
		case !ok || done:
			t.Fatalf("POST %s %q: a stream line %q (after [DONE]: %v)", path, body, line, done)
		case data == "[DONE]":
			done = true
		case !json.Valid([]byte(data)):
			t.Fatalf("POST %s %q: an event of invalid JSON %q", path, body, data)
		case strings.Contains(data, `"server_error"`):
			t.Fatalf("POST %s %q: a server error in the stream: %s", path, body, data)
		}
	}
	if !done {
		t.Fatalf("POST %s %q: the stream ended without [DONE]:\n%s", path, body, stream)
	}
}
