package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var listeningAddr = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServe runs `redrafter serve` on a free loopback port and returns its
// URL once it logs that it listens (the model loaded), with the lines it
// logged before that.
func startServe(t *testing.T, args ...string) (cmd *exec.Cmd, url string, early []string) {
	t.Helper()
	cmd = exec.Command(bin, append([]string{"serve", "--backend", "cpu", "-m", stories, "--port", "0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		early = append(early, sc.Text())
		if m := listeningAddr.FindStringSubmatch(sc.Text()); m != nil {
			url = "http://" + m[1]
			break
		}
	}
	if url == "" {
		t.Fatalf("serve never listened:\n%s", strings.Join(early, "\n"))
	}
	go io.Copy(io.Discard, stderr)
	return cmd, url, early
}

// SIGTERM under load, as Kubernetes stops a pod: /readyz turns 503 at once
// while requests are still accepted for --drain-delay; the load balancer
// (here the clients) stops sending on seeing it; every request sent gets
// its whole completion, those in flight at the signal included, and the
// process exits 0. The probes answered before the model was in: "loading
// the model" is logged with the address before "listening".
func TestServeDrainsOnSIGTERM(t *testing.T) {
	cmd, url, early := startServe(t, "--parallel", "2", "--queue", "16", "--drain-delay", "1s", "--shutdown-timeout", "30s")
	if !strings.Contains(early[0], "loading the model") || !strings.Contains(early[0], "addr=127.0.0.1:") {
		t.Errorf("the first line is not the listener's while loading: %q", early[0])
	}
	if status, word := getStatus(t, url+"/readyz"); status != 200 || word != "ready" {
		t.Fatalf("readyz once listening: %d %q", status, word)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var (
		stopSending atomic.Bool
		signalled   atomic.Int64 // unix nanoseconds of the SIGTERM
		mu          sync.Mutex
		sent, late  int
		failures    []string
	)
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopSending.Load() {
				body := `{"prompt":"Once upon a time","max_tokens":48,"temperature":0,"seed":` + string(rune('0'+c)) + `}`
				resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
				var text string
				status := 0
				if err == nil {
					status = resp.StatusCode
					var r struct {
						Choices []struct{ Text string } `json:"choices"`
					}
					err = json.NewDecoder(resp.Body).Decode(&r)
					resp.Body.Close()
					if len(r.Choices) == 1 {
						text = r.Choices[0].Text
					}
				}
				mu.Lock()
				sent++
				if err != nil || status != 200 || text == "" {
					failures = append(failures, fmt.Sprint(err, " ", status))
				} else if s := signalled.Load(); s != 0 && time.Now().UnixNano() > s {
					late++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	signalled.Store(time.Now().UnixNano())
	cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(900 * time.Millisecond) // within the drain delay
	for {
		status, word := getStatus(t, url+"/readyz")
		if status == 503 && word == "draining" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz after SIGTERM: %d %q, want 503 draining", status, word)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopSending.Store(true)
	if status, _ := getStatus(t, url+"/livez"); status != 200 {
		t.Errorf("livez while draining: %d", status)
	}
	wg.Wait()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve still running 30 s after SIGTERM")
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d requests lost: %v", len(failures), sent, failures)
	}
	if late == 0 {
		t.Errorf("no request finished after the SIGTERM (%d sent): nothing was in flight to drain", sent)
	}
	t.Logf("%d requests, %d finished after SIGTERM", sent, late)
}

func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Status string }
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Status
}

// Beyond loopback, serve wants an API key, or --no-api-key to say the open
// port is meant.
func TestServeOpenPortNeedsKey(t *testing.T) {
	_, stderr, err := runCLI(t, "serve", "--backend", "cpu", "-m", stories, "--host", "0.0.0.0", "--port", "0")
	if err == nil || !strings.Contains(stderr, "--no-api-key") {
		t.Errorf("--host 0.0.0.0 without a key: %v %q, want an error naming --no-api-key", err, stderr)
	}
}
