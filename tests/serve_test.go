package tests

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// redrafter serve on a Unix socket (mode 0600): it answers there, and
// Ctrl-C shuts it down cleanly (exit 0) and removes the socket.
func TestServeUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redrafter.sock")
	cmd := exec.Command(bin, "serve", "--backend", "cpu", "-m", stories, "--socket", sock)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	var logs strings.Builder
	for sc.Scan() {
		logs.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "msg=listening") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v\n%s", st, err, logs.String())
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://redrafter/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health over the socket: %v %v", resp, err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after Ctrl-C: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve still running 30 s after Ctrl-C")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind: %v", err)
	}
}

func TestServeFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(file, []byte("keep me"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--parallel", "0"}, "--parallel 0"},
		{[]string{"--queue", "-1"}, "--queue -1"},
		{[]string{"--port", "70000"}, "--port 70000"},
		{[]string{"--socket", file}, "not a socket"},
		{[]string{"--socket", file, "--port", "1"}, "not both"},
		{[]string{"--allowed-host", "llm.example.com:443"}, "--allowed-host"},
		{[]string{"--allowed-host", "https://llm.example.com"}, "--allowed-host"},
		// A beam that cannot fit the context would fail every request.
		{[]string{"--drafter", storiesHead, "--beam-width", "50", "--beam-length", "50"}, "--beam-width 50 --beam-length 50: redrafter: beams of 50×50 need up to 2451 tokens, more than the context of"},
	} {
		_, stderr, err := runCLI(t, append([]string{"serve", "--backend", "cpu", "-m", stories}, c.args...)...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %v %q, want an error with %q", c.args, err, stderr, c.want)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Error("--socket over a regular file changed it")
	}
}

// serveTCP starts redrafter serve on a free loopback port with args and
// returns its address once it listens; the server is killed at the end of
// the test.
func serveTCP(t *testing.T, args ...string) string {
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
		if _, rest, ok := strings.Cut(sc.Text(), "msg=listening addr="); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("serve did not listen:\n%s", logs.String())
	return ""
}

// A web page cannot drive serve: a Host that is not the server's (DNS
// rebinding) gets 403 and a POST that is not JSON 415; --allowed-host adds
// a reverse proxy's name.
func TestServeRefusesWebPages(t *testing.T) {
	addr := serveTCP(t, "--allowed-host", "llm.example.com")
	_, port, _ := net.SplitHostPort(addr)
	do := func(host, contentType string) int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/completions", strings.NewReader(`{"prompt":"Once","max_tokens":2}`))
		req.Host = host
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		host, contentType string
		want              int
	}{
		{"evil.example:" + port, "application/json", 403},
		{"attacker.example", "application/json", 403},
		{"localhost:" + port, "text/plain", 415},
		{"localhost:" + port, "", 415},
		{"localhost:" + port, "application/json", 200},
		{addr, "application/json", 200},
		{"llm.example.com", "application/json", 200},
		{"llm.example.com:443", "application/json; charset=utf-8", 200},
	} {
		if got := do(c.host, c.contentType); got != c.want {
			t.Errorf("Host %s, Content-Type %q: %d, want %d", c.host, c.contentType, got, c.want)
		}
	}
}
